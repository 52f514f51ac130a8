// Command amiss is the local entry point of the amiss delivery controller.
//
//	amiss serve  [-config FILE] [-root DIR] [-listen ADDR] [-stranded-after D]
//	                                      the three handlers in one process over a file root;
//	                                      unfinished rows are queued again at start
//	amiss sign   [-config FILE] [-route NAME] [-title T] [-send]
//	                                      a signed sample webhook: print its curl command, or send it
//	amiss demo   [-config FILE] [-root DIR]
//	                                      run a sample delivery through every state on a file root
//	amiss check  [-config FILE] [-root DIR]
//	                                      read every secret, probe the ledger and the publishers
//	amiss check  -template template.yaml [-function NAME] [-config FILE]
//	                                      the variables the configuration reads are declared
//	amiss ledger stats   [-root DIR]      counts by state, capacity, high-water clock
//	                                      (DIR: a file root, or s3://bucket/prefix/)
//	amiss ledger list    [-root DIR] [-state S]
//	                                      full keys by state, one row a line
//	amiss ledger inspect [-root DIR] KEY  one row, as JSON, with the verdict it froze
//	amiss ledger republish [-root DIR] [-queue URL] KEY | -abandoned [-since T]
//	                                      revive abandoned verdicts (same bytes) and queue them
//	amiss ledger s3-setup -root s3://bucket/prefix/ [-noncurrent-days N]
//	                                      versioning and a lifecycle rule on the ledger's bucket
//	amiss ledger verify  [-root DIR]      decode every file and check the capacity record
//	amiss ledger cleanup [-root DIR]      run cleanup passes until a lap is done
//	amiss version                         the build: version, commit, Go
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
)

const defaultRoot = "var/ledger"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "amiss:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `usage: amiss COMMAND [flags]   (amiss COMMAND -h for a command's flags)

  serve     the ingress, the runner and the cleanup in one process over a file root
  sign      a signed sample webhook: print its curl command, or send it (-send)
  demo      one sample delivery through every state of a file root, without a server
  check     read every secret, probe the ledger and the publishers' base URLs;
            with -template, check a packaged configuration against a SAM template
  ledger    stats | list | inspect KEY | republish | verify | cleanup,
            on a file root or s3://bucket/prefix/; s3-setup readies a bucket
  version   the build: version, commit, Go`

var errUsage = errors.New("usage: amiss serve|sign|demo|check|ledger stats|list|inspect|republish|verify|cleanup|s3-setup|version (amiss -h for help)")

// flagOutput receives flag usage and errors (run points it at its stderr).
var flagOutput io.Writer = os.Stderr

// newFlags returns a flag set for "amiss NAME" whose usage names the command.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(flagOutput)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: amiss %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; -h answers flag.ErrHelp (run prints nothing more and succeeds), any
// other mistake is a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flagOutput = stderr
	err := dispatch(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag set printed its usage
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	switch args[0] {
	case "serve":
		o, err := parseServe(args[1:])
		if err != nil {
			return err
		}
		return runServe(ctx, o, stdout)
	case "sign":
		return runSign(args[1:], stdout)
	case "demo":
		return runDemo(ctx, args[1:], stdout)
	case "check":
		return runCheck(ctx, args[1:], stdout)
	case "ledger":
		if len(args) < 2 {
			return errUsage
		}
		return runLedger(ctx, args[1], args[2:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("%w (unknown command %q)", errUsage, args[0])
}

// version is set at build time by the Makefile (-ldflags "-X main.version=..."); without it
// the module's build information is used.
var version string

func versionString() string {
	v, rev, modified := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	s := "amiss " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " commit " + rev
		if modified {
			s += " (modified)"
		}
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func rootFlags(name string, args []string) (*flag.FlagSet, *string, error) {
	fs := newFlags(name, "[-root DIR]")
	root := fs.String("root", defaultRoot, "ledger root folder, or s3://bucket/prefix/")
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	return fs, root, nil
}
