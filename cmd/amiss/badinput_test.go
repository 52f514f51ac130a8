package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/localfs"
)

// nobody is the user a child runs as when a test needs a folder this user may not read and the
// tests run as root (root reads every folder whatever its mode).
const nobody = 65534

// An amissWorld is a folder laid out as the repository is for a newcomer (examples/amiss.yaml,
// docs/, var/), holding a copy of this test binary that runs as amiss (see TestMain). Every
// user may read it, so that a child may run as nobody.
type amissWorld struct {
	dir, bin string
}

func newAmissWorld(t *testing.T) *amissWorld {
	t.Helper()
	dir, err := os.MkdirTemp("", "amiss-world-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				os.Chmod(p, 0o755) // the unreadable folders, for RemoveAll
			}
			return nil
		})
		os.RemoveAll(dir)
	})
	w := &amissWorld{dir: dir, bin: filepath.Join(dir, "bin", "amiss")}
	for _, d := range []string{"bin", "examples", "docs", "var"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string][]byte{w.bin: self, "examples/amiss.yaml": cfg, "docs/benchmarks.md": []byte("# Benchmarks\n")} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// path is a path inside the world.
func (w *amissWorld) path(p string) string { return filepath.Join(w.dir, p) }

// run runs amiss with args in the world's folder, with the environment of this test less
// AMISS_DEMO_SECRET, plus env; as nobody when asNobody and this test runs as root. It returns
// the exit status and what amiss wrote.
func (w *amissWorld) run(t *testing.T, asNobody bool, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// A guard only, so that a command that should have failed cannot hang the test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Dir = w.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, demoSecretVar+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "AMISS_TEST_RUN_MAIN=1"), env...)
	if asNobody && os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		code = exit.ExitCode()
	default:
		t.Fatalf("amiss %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// Every bad input a newcomer may give amiss is answered with what is wrong and what to do, and
// the exit status says which kind of failure it is: 2 for a command line amiss cannot act on
// (it never started any work), 1 for a command that failed. Each runs amiss itself, as a
// process, from a folder laid out as the repository is.
func TestEveryBadInputSaysWhatIsWrongAndWhatToDo(t *testing.T) {
	w := newAmissWorld(t)
	secret := []string{demoSecretVar + "=" + demoSecret}

	// A root made by the demo, for the commands that take a KEY.
	if code, out, errOut := w.run(t, false, nil, "demo", "-root", "var/ledger"); code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", code, out, errOut)
	}
	// A root whose root state was lost: the folder holds a ledger's rows, and no limits.
	if code, out, errOut := w.run(t, false, nil, "demo", "-root", "var/lost"); code != 0 {
		t.Fatalf("demo: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.Remove(w.path("var/lost/" + localfs.RootFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(w.path("var/empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A folder this user may not read: mode 0 (root runs the commands on it as nobody).
	if err := os.Mkdir(w.path("var/locked"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(w.path("var/locked"), 0); err != nil {
		t.Fatal(err)
	}
	// An address in use.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()
	// The address the answer suggests instead: the port 10000 above (or below), never the one in use.
	busyPort := busy.Addr().(*net.TCPAddr).Port
	otherBusy := fmt.Sprintf("127.0.0.1:%d", busyPort+10000)
	if busyPort+10000 > 65535 {
		otherBusy = fmt.Sprintf("127.0.0.1:%d", busyPort-10000)
	}
	missingKey := strings.Repeat("ab", 32)

	for _, c := range []struct {
		name     string
		args     []string
		env      []string
		asNobody bool
		code     int
		want     []string // each in stderr
		not      []string // none in stderr
		out      []string // each in stdout
	}{
		// -root
		{name: "a mistyped root", args: []string{"ledger", "stats", "-root", "var/ledgr"}, code: 1,
			want: []string{"-root var/ledgr: no such folder", "check the path", "amiss serve or amiss demo", "var/ledger"},
			not:  []string{"does not match configuration"}},
		{name: "a mistyped root, for list", args: []string{"ledger", "list", "-root", "var/ledgr"}, code: 1,
			want: []string{"-root var/ledgr: no such folder", "check the path"}},
		{name: "a folder that is not a root", args: []string{"ledger", "stats", "-root", "docs"}, code: 1,
			want: []string{"-root docs: not a ledger root", "benchmarks.md", "give -root the folder amiss serve or amiss demo made"},
			not:  []string{"ledger data"}},
		{name: "an empty folder", args: []string{"ledger", "verify", "-root", "var/empty"}, code: 1,
			want: []string{"not a ledger root"}},
		{name: "a file as the root", args: []string{"ledger", "stats", "-root", "docs/benchmarks.md"}, code: 1,
			want: []string{"a file, not a folder", "give -root"}},
		{name: "serve over a mistyped root", args: []string{"serve", "-root", "var/ledgr", "-listen", "127.0.0.1:0"}, env: secret, code: 1,
			want: []string{"-root var/ledgr: no such folder", "check the path", "var/ledger", "amiss serve -create -root var/ledgr",
				"make run ROOT=var/ledgr CREATE=yes"}},
		{name: "serve over an empty folder", args: []string{"serve", "-root", "var/empty", "-listen", "127.0.0.1:0"}, env: secret, code: 1,
			want: []string{"-root var/empty: an empty folder, not a ledger root", "amiss serve -create -root var/empty"}},
		{name: "serve over a folder that holds other files", args: []string{"serve", "-root", "docs", "-listen", "127.0.0.1:0"}, env: secret,
			code: 1, want: []string{"-root docs: the folder holds benchmarks.md, not a ledger", "choose another -root", "ROOT="},
			not: []string{"ledger data"}},
		{name: "demo over a folder that holds other files", args: []string{"demo", "-root", "examples"}, code: 1,
			want: []string{"-root examples: the folder holds amiss.yaml, not a ledger", "choose another -root"}},
		{name: "serve over a root that lost its root state", args: []string{"serve", "-root", "var/lost", "-listen", "127.0.0.1:0"},
			env: secret, code: 1, want: []string{"the folder holds ledger data", "rows", localfs.RootFile, "restore", "backup"}},
		{name: "an unreadable folder", args: []string{"ledger", "stats", "-root", "var/locked"}, asNobody: true, code: 1,
			want: []string{"-root var/locked: this user may not use the folder", "permission denied", "the user that owns it", "ls -ld"},
			not:  []string{"store unavailable"}},
		{name: "serve over an unreadable folder", args: []string{"serve", "-root", "var/locked", "-listen", "127.0.0.1:0"},
			env: secret, asNobody: true, code: 1,
			want: []string{"-root var/locked: this user may not use the folder", "permission denied", "choose another -root"},
			not:  []string{"store unavailable"}},
		{name: "check over a folder that holds other files", args: []string{"check", "-root", "docs"}, env: secret, code: 1,
			want: []string{"check failed"},
			out:  []string{"FAIL  ledger docs: -root docs: the folder holds benchmarks.md, not a ledger", "choose another -root"}},
		{name: "check over an unreadable folder", args: []string{"check", "-root", "var/locked"}, env: secret, asNobody: true, code: 1,
			want: []string{"check failed"},
			out:  []string{"FAIL  ledger var/locked: -root var/locked: this user may not use the folder", "the user that owns it"}},
		// -listen
		{name: "an address in use", args: []string{"serve", "-create", "-root", "var/serve", "-listen", busyAddr}, env: secret, code: 1,
			want: []string{"-listen " + busyAddr + ": the address is in use", "amiss serve -listen " + otherBusy, "make run LISTEN=" + otherBusy}},
		{name: "an address that is not one", args: []string{"serve", "-create", "-root", "var/serve", "-listen", "localhost"}, env: secret, code: 1,
			want: []string{"-listen localhost", "HOST:PORT"}},
		// secrets and configuration
		{name: "sign without its secret", args: []string{"sign"}, code: 1,
			want: []string{"cannot sign", "env:" + demoSecretVar, "export " + demoSecretVar + "=", "the value the server checks", "README"}},
		{name: "sign -send without its secret", args: []string{"sign", "-send", "-url", "http://" + busyAddr}, code: 1,
			want: []string{"cannot sign", "export " + demoSecretVar + "="}},
		{name: "check without its secret", args: []string{"check", "-root", "var/ledger"}, code: 1,
			want: []string{"check failed"}},
		{name: "serve without its secret", args: []string{"serve", "-root", "var/serve", "-listen", "127.0.0.1:0"}, code: 1,
			want: []string{"cannot start", "env:" + demoSecretVar, "export " + demoSecretVar + "="}},
		{name: "a configuration that is not there", args: []string{"sign", "-config", "amiss.yaml"}, env: secret, code: 1,
			want: []string{"-config amiss.yaml: no such file", "the repository's folder", "give -config"}},
		{name: "sign to a route the configuration lacks", args: []string{"sign", "-route", "github"}, env: secret, code: 2,
			want: []string{`-route "github"`, "routes: demo"}},
		// flags and arguments
		{name: "an unknown flag", args: []string{"serve", "-nosuchflag"}, code: 2,
			want: []string{"serve: flag provided but not defined: -nosuchflag", "amiss serve -h"}},
		{name: "an unknown flag of ledger list", args: []string{"ledger", "list", "-nosuchflag"}, code: 2,
			want: []string{"ledger list: flag provided but not defined: -nosuchflag", "amiss ledger list -h"}},
		{name: "an unknown flag of ledger republish", args: []string{"ledger", "republish", "-x"}, code: 2,
			want: []string{"ledger republish: flag provided but not defined: -x", "amiss ledger republish -h"}},
		{name: "a flag without its value", args: []string{"serve", "-listen"}, code: 2,
			want: []string{"flag needs an argument: -listen", "amiss serve -h"}},
		{name: "a bad value", args: []string{"serve", "-lease", "soon"}, code: 2,
			want: []string{"-lease", "amiss serve -h"}},
		{name: "an argument where none is taken", args: []string{"ledger", "stats", "var/ledger"}, code: 2,
			want: []string{`unexpected argument "var/ledger"`, "amiss ledger stats -h"}},
		{name: "inspect without its KEY", args: []string{"ledger", "inspect"}, code: 2,
			want: []string{"ledger inspect: give one KEY", "64 hex digits", "amiss ledger list", "amiss ledger inspect -h"}},
		{name: "inspect with part of a KEY", args: []string{"ledger", "inspect", "abcdef012345"}, code: 2,
			want: []string{`KEY "abcdef012345"`, "64 hex digits"}},
		{name: "inspect with a KEY the root lacks", args: []string{"ledger", "inspect", missingKey}, code: 1,
			want: []string{"no row " + missingKey + " in var/ledger", "amiss ledger list -root var/ledger"}},
		{name: "republish without its KEY", args: []string{"ledger", "republish"}, code: 2,
			want: []string{"ledger republish: give one KEY", "amiss ledger republish -h"}},
		{name: "republish -since without -abandoned", args: []string{"ledger", "republish", "-since", "1h", missingKey}, code: 2,
			want: []string{"-since goes with -abandoned"}},
		{name: "a state that is not one", args: []string{"ledger", "list", "-state", "finished"}, code: 2,
			want: []string{`-state "finished"`, "abandoned"}},
		// commands
		{name: "no command", code: 2, want: []string{"no command given", "serve", "ledger", "amiss -h"}},
		{name: "an unknown command", args: []string{"serv"}, code: 2,
			want: []string{`unknown command "serv"`, "serve, sign", "amiss -h"}},
		{name: "ledger without a subcommand", args: []string{"ledger"}, code: 2,
			want: []string{"ledger: no subcommand given", "stats, list, inspect", "amiss ledger -h"}},
		{name: "an unknown ledger subcommand", args: []string{"ledger", "stat"}, code: 2,
			want: []string{`ledger: unknown subcommand "stat"`, "stats", "amiss ledger -h"}},
		{name: "version with an argument", args: []string{"version", "now"}, code: 2,
			want: []string{`version: unexpected argument "now"`}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			code, stdout, stderr := w.run(t, c.asNobody, c.env, c.args...)
			if code != c.code {
				t.Errorf("amiss %s: exit %d, want %d\n%s", strings.Join(c.args, " "), code, c.code, stderr)
			}
			for _, want := range c.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("amiss %s: the error does not say %q:\n%s", strings.Join(c.args, " "), want, stderr)
				}
			}
			for _, want := range c.out {
				if !strings.Contains(stdout, want) {
					t.Errorf("amiss %s: the output does not say %q:\n%s", strings.Join(c.args, " "), want, stdout)
				}
			}
			for _, not := range c.not {
				if strings.Contains(stderr, not) {
					t.Errorf("amiss %s: the error says %q:\n%s", strings.Join(c.args, " "), not, stderr)
				}
			}
		})
	}
	// A command refused over a folder of other files leaves nothing in it.
	for _, d := range []string{"docs", "examples"} {
		entries, err := os.ReadDir(w.path(d))
		if err != nil || len(entries) != 1 {
			t.Errorf("%s after the refusals: %v %v, want its one file", d, entries, err)
		}
	}
	// A serve refused over a mistyped root made nothing there, and left the empty folder empty.
	if _, err := os.Stat(w.path("var/ledgr")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("var/ledgr after serve refused it: %v, want no such folder", err)
	}
	if entries, err := os.ReadDir(w.path("var/empty")); err != nil || len(entries) != 0 {
		t.Errorf("var/empty after serve refused it: %v %v, want it empty", entries, err)
	}
	// check prints each failure with its remedy on stdout.
	code, stdout, _ := w.run(t, false, nil, "check", "-root", "var/ledger")
	if code != 1 || !strings.Contains(stdout, "FAIL  routes.demo.secrets[0].from") || !strings.Contains(stdout, "export "+demoSecretVar+"=") {
		t.Errorf("check without its secret: exit %d\n%s", code, stdout)
	}
}

// Every command and subcommand answers -h alike: its usage on stdout, starting with its
// synopsis (KEY named where one is taken), nothing on stderr, exit status 0.
func TestEveryCommandAnswersHelpAlike(t *testing.T) {
	for _, c := range []struct {
		args     []string
		synopsis string
	}{
		{[]string{"-h"}, "usage: amiss COMMAND"},
		{[]string{"help"}, "usage: amiss COMMAND"},
		{[]string{"serve", "-h"}, "usage: amiss serve "},
		{[]string{"sign", "-h"}, "usage: amiss sign "},
		{[]string{"demo", "-h"}, "usage: amiss demo "},
		{[]string{"check", "-h"}, "usage: amiss check "},
		{[]string{"version", "-h"}, "usage: amiss version"},
		{[]string{"ledger", "-h"}, "usage: amiss ledger SUBCOMMAND"},
		{[]string{"ledger", "help"}, "usage: amiss ledger SUBCOMMAND"},
		{[]string{"ledger", "stats", "-h"}, "usage: amiss ledger stats [-root DIR]"},
		{[]string{"ledger", "list", "-h"}, "usage: amiss ledger list [-root DIR] [-state S]"},
		{[]string{"ledger", "inspect", "-h"}, "usage: amiss ledger inspect [-root DIR] KEY"},
		{[]string{"ledger", "republish", "--help"}, "usage: amiss ledger republish [-root DIR] [-queue URL] KEY | -abandoned [-since T]"},
		{[]string{"ledger", "verify", "-h"}, "usage: amiss ledger verify [-root DIR]"},
		{[]string{"ledger", "cleanup", "-h"}, "usage: amiss ledger cleanup [-root DIR]"},
		{[]string{"ledger", "s3-setup", "-h"}, "usage: amiss ledger s3-setup -root s3://bucket/prefix/"},
		{[]string{"ledger", "migrate", "-h"}, "usage: amiss ledger migrate [-root DIR]"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), c.args, &out, &errOut)
		name := "amiss " + strings.Join(c.args, " ")
		if err != nil {
			t.Errorf("%s: %v, want its usage and exit 0", name, err)
		}
		if !strings.HasPrefix(out.String(), c.synopsis) {
			t.Errorf("%s printed on stdout:\n%s\nwant it to start %q", name, out.String(), c.synopsis)
		}
		if errOut.Len() != 0 {
			t.Errorf("%s printed on stderr:\n%s", name, errOut.String())
		}
	}
	// The ledger's usage names every subcommand with its synopsis.
	var out bytes.Buffer
	if err := run(context.Background(), []string{"ledger", "-h"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, lc := range ledgerCommands {
		if !strings.Contains(out.String(), "amiss ledger "+lc.name+" "+lc.synopsis) {
			t.Errorf("amiss ledger -h does not show %q:\n%s", lc.name+" "+lc.synopsis, out.String())
		}
	}
}
