package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// This file turns the failures a newcomer meets first (a configuration that is not there, a
// -root that is mistyped, foreign or unreadable, a -listen address in use) into errors that say
// what is wrong and what to do. Each keeps the original error in its chain for errors.Is.

const (
	// defaultConfig is the example configuration, relative to the repository's folder.
	defaultConfig = "examples/amiss.yaml"
	// demoSecretVar is the variable the example configuration reads its secret from (the
	// Makefile exports the Standard Webhooks specification's test key in it).
	demoSecretVar = "AMISS_DEMO_SECRET"
	// makeRoot is what the make targets pass as ROOT, in the words of a remedy.
	makeRoot = "make run's is " + defaultRoot
)

// loadConfig loads the configuration at path; a file that is not there is explained.
func loadConfig(path string, getenv func(string) string) (*config.Config, error) {
	cfg, err := config.LoadEnv(path, getenv)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("-config %s: no such file: run amiss from the repository's folder (the default, %s, is relative "+
			"to it), or give -config the configuration's path: %w", path, defaultConfig, err)
	}
	return cfg, err
}

// A rootError is a -root folder that cannot be used, with what to do about it.
type rootError struct {
	spec, problem, remedy string
	err                   error
}

func (e *rootError) Error() string {
	return fmt.Sprintf("-root %s: %s: %s", e.spec, e.problem, e.remedy)
}

func (e *rootError) Unwrap() error { return e.err }

// explainMkdir explains a -root folder that could not be created.
func explainMkdir(spec string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return &rootError{spec, fmt.Sprintf("cannot create the folder (%v)", unwrapPath(err)),
			"choose a -root inside a folder this user may write (with make: ROOT=...), or create it for this user", err}
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, fs.ErrExist):
		return &rootError{spec, fmt.Sprintf("cannot create the folder (%v)", unwrapPath(err)),
			"a part of the path is a file, not a folder: check the path", err}
	}
	return err
}

// explainRoot explains why opening the file root spec failed with err, when the folder shows
// why: it does not exist, is not a folder, may not be read or written by this user, is not a
// ledger root, or (create: a command that makes a missing root) holds files that are not a
// ledger's, or a ledger's without its root state. Otherwise, and for an S3 ledger, err is
// returned as it is.
func explainRoot(spec string, create bool, err error) error {
	loc, perr := wiring.ParseLocation(spec, "-root", true)
	if perr != nil || loc.Bucket != "" {
		return err
	}
	dir := loc.Dir
	explain := func(problem, remedy string) error { return &rootError{spec, problem, remedy, err} }
	findRoot := "give -root the folder amiss serve or amiss demo made (" + makeRoot + ")"
	st, serr := os.Stat(dir)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		return explain("no such folder", "check the path; "+findRoot)
	case errors.Is(serr, syscall.ENOTDIR):
		return explain("a part of the path is a file, not a folder", "check the path; "+findRoot)
	case serr != nil && !errors.Is(serr, fs.ErrPermission):
		return err
	case serr == nil && !st.IsDir():
		return explain("a file, not a folder", findRoot)
	}
	if denied := accessProblem(dir, serr); denied != nil {
		return explain(fmt.Sprintf("this user may not use the folder (%v)", denied),
			fmt.Sprintf("run amiss as the user that owns it (ls -ld %s shows who), give this user read and write access, "+
				"or choose another -root", dir))
	}
	if !errors.Is(err, ledger.ErrRootMismatch) {
		return err
	}
	if _, serr := os.Stat(filepath.Join(dir, localfs.RootFile)); !errors.Is(serr, fs.ErrNotExist) {
		return err // the root is there: its own error says what is wrong with it
	}
	foreign, ledgerData := folderContents(dir)
	switch {
	case len(ledgerData) > 0:
		return explain(fmt.Sprintf("the folder holds ledger data (%s) but no %s, the root state that records its limits",
			list(ledgerData), localfs.RootFile),
			"restore "+localfs.RootFile+" from a backup of this root (docs/file-ledger.md), or choose another -root; "+
				"amiss never makes a new root over ledger data")
	case len(foreign) > 0 && create:
		return explain(fmt.Sprintf("the folder holds %s, not a ledger", list(foreign)),
			"amiss makes a root only in a new or empty folder: choose another -root (with make: ROOT=var/other)")
	case len(foreign) > 0:
		return explain(fmt.Sprintf("not a ledger root (the folder holds %s, and no %s)", list(foreign), localfs.RootFile), findRoot)
	case !create:
		return explain("an empty folder, not a ledger root", findRoot)
	}
	return err
}

// refuseNewRoot refuses to make a root in the folder dir (spec as given) for the command cmd,
// which was not told to (-create): a missing or empty folder is most likely a mistyped -root,
// and serving it would start an empty ledger beside the one meant. A folder holding other
// entries is left to the usual checks, which say what it holds.
func refuseNewRoot(cmd, spec, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, localfs.RootFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	problem := "no such folder"
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		if foreign, ledgerData := folderContents(dir); len(foreign) > 0 || len(ledgerData) > 0 {
			return nil
		}
		problem = "an empty folder, not a ledger root"
	} else if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return &rootError{spec, problem, fmt.Sprintf("check the path (%s); to make a new root there, amiss %s -create -root %s "+
		"(with make: make run ROOT=%s CREATE=yes)", makeRoot, cmd, spec, spec), fs.ErrNotExist}
}

// refuseForeignFolder refuses, before anything is written there, to make a root in the folder
// dir (spec as given) when it holds no root state and entries the FileLedger would refuse to
// make a root over (anything but lock and temporary files and the row folders an interrupted
// creation leaves, which it checks itself): opening it would leave lock files behind in a
// folder that is not a ledger's.
func refuseForeignFolder(spec, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, localfs.RootFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	foreign, ledgerData := folderContents(dir)
	if len(foreign) == 0 && (len(ledgerData) == 0 || len(ledgerData) == 1 && ledgerData[0] == localfs.RowsDir) {
		return nil
	}
	return explainRoot(spec, true, fmt.Errorf("%w: %s is missing and the folder holds other entries", ledger.ErrRootMismatch,
		filepath.Join(dir, localfs.RootFile)))
}

// accessProblem reports what this user may not do that every command on a root does: list
// and write the folder (each command takes locks there), read the root state and open the
// lock files. statErr is the folder's own stat error.
func accessProblem(dir string, statErr error) error {
	if statErr != nil {
		return unwrapPath(statErr)
	}
	if err := unix.Access(dir, unix.R_OK|unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return unwrapPath(err)
	}
	for _, e := range entries {
		mode := uint32(0)
		switch n := e.Name(); {
		case n == localfs.RootFile:
			mode = unix.R_OK
		case strings.HasSuffix(n, ".lock"):
			mode = unix.R_OK | unix.W_OK
		}
		if mode != 0 {
			p := filepath.Join(dir, e.Name())
			if err := unix.Access(p, mode); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	return nil
}

// ledgerEntries are the entries a FileLedger root holds besides its lock and temporary files.
var ledgerEntries = map[string]bool{localfs.RowsDir: true, localfs.EndedDir: true, localfs.SubjectsDir: true,
	localfs.BatchFile: true, localfs.SweepFile: true, localfs.RoomFile: true}

// folderContents names a folder's entries: those no ledger makes, and a ledger's data (its
// lock and temporary files aside, which any command leaves).
func folderContents(dir string) (foreign, ledgerData []string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.HasSuffix(n, ".lock") || strings.Contains(n, ".tmp-"):
		case ledgerEntries[n] || strings.HasPrefix(n, ".amiss-"):
			ledgerData = append(ledgerData, n)
		default:
			foreign = append(foreign, n)
		}
	}
	sort.Strings(foreign)
	sort.Strings(ledgerData)
	return foreign, ledgerData
}

// list names at most three entries, and how many more there are.
func list(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
}

// unwrapPath is a *fs.PathError's operation-free text: the path and the cause.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// explainListen explains why amiss serve could not listen on addr.
func explainListen(addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		other := otherAddress(addr)
		return fmt.Errorf("-listen %s: the address is in use (another amiss serve, or another program, listens there): "+
			"stop it, or listen elsewhere: amiss serve -listen %s, or make run LISTEN=%s "+
			"(and the same LISTEN= for make sign): %w", addr, other, other, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("-listen %s: this user may not listen there (ports below 1024 need privileges): "+
			"choose a port from 1024 up, such as -listen 127.0.0.1:8080: %w", addr, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("-listen %s: no network interface of this machine has that address: listen on 127.0.0.1:PORT "+
			"(loopback), or an address this machine has: %w", addr, err)
	}
	return fmt.Errorf("-listen %s: cannot listen: give HOST:PORT, such as 127.0.0.1:8080: %w", addr, err)
}

// otherAddress suggests an address instead of addr, which is in use: the same host, on the port
// 10000 above (8080 gives 18080), or below when that is past the last port.
func otherAddress(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return "127.0.0.1:18080"
	}
	if p += 10000; p > 65535 {
		p -= 20000
	}
	return net.JoinHostPort(host, strconv.Itoa(p))
}
