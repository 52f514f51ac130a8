// Command amiss is the local entry point of the amiss delivery controller.
//
//	amiss serve  [-config FILE] [-root DIR] [-create] [-listen ADDR] [-stranded-after D]
//	                                      the three handlers in one process over a file root
//	                                      (-create: make it when missing); unfinished rows are
//	                                      queued again at start
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
//	amiss ledger migrate [-root DIR]      migrate a file root of an older format (the other
//	                                      commands refuse one rather than change it)
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
	"strings"
	"syscall"

	"github.com/amiss-ci/amiss/internal/buildinfo"
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
  ledger    stats | list | inspect KEY | republish KEY | verify | cleanup | migrate,
            on a file root or s3://bucket/prefix/; s3-setup readies a bucket
  version   the build: version, commit, Go`

// commands are the top-level commands, in the order usage lists them.
var commands = []string{"serve", "sign", "demo", "check", "ledger", "catchup", "version"}

// errUsage marks a command line amiss cannot act on: a flag it does not know, a missing or
// malformed argument, an unknown command. main exits with status 2 for it (1 for any other
// failure, 0 for -h). Match it with errors.Is; the error itself is a *usageError.
var errUsage = errors.New("usage error")

// A usageError says what is wrong with a command line and where its usage is shown.
type usageError struct {
	// cmd is the command ("serve", "ledger inspect"), empty for the top level.
	cmd     string
	problem string
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return e.problem + " (amiss -h lists the commands)"
	}
	return fmt.Sprintf("%s: %s (amiss %s -h shows its usage)", e.cmd, e.problem, e.cmd)
}

// Is makes errors.Is(err, errUsage) hold.
func (e *usageError) Is(target error) bool { return target == errUsage }

// usagef is a usage error of the command cmd.
func usagef(cmd, format string, a ...any) error {
	return &usageError{cmd: cmd, problem: fmt.Sprintf(format, a...)}
}

// helpOutput receives the usage a -h asks for (run points it at its stdout).
var helpOutput io.Writer = os.Stdout

// A command is the flag set of "amiss NAME": -h prints its synopsis, what it does and its
// flags on stdout and succeeds; any other mistake is a usage error naming the command.
type command struct {
	*flag.FlagSet
	name, synopsis, about string
}

// newCommand returns the flag set of "amiss name"; synopsis follows the name in the usage
// line, about says what the command does.
func newCommand(name, synopsis, about string) *command {
	c := &command{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), name: name, synopsis: synopsis, about: about}
	c.SetOutput(io.Discard) // parse reports mistakes itself
	c.Usage = func() {}
	return c
}

// printUsage writes the command's usage: synopsis, what it does, and its flags.
func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n%s\n", strings.TrimSpace("usage: amiss "+c.name+" "+c.synopsis), c.about)
	n := 0
	c.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nflags:")
		c.SetOutput(w)
		c.PrintDefaults()
		c.SetOutput(io.Discard)
	}
}

// parse parses args. -h (or -help) prints the usage and answers flag.ErrHelp, which run turns
// into success; any other mistake is a usage error.
func (c *command) parse(args []string) error {
	err := c.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printUsage(helpOutput)
		return err
	case err != nil:
		return c.usagef("%v", err)
	}
	return nil
}

// usagef is a usage error of this command.
func (c *command) usagef(format string, a ...any) error { return usagef(c.name, format, a...) }

// noArgs refuses arguments after the flags of a command that takes none.
func (c *command) noArgs() error {
	if c.NArg() > 0 {
		return c.usagef("unexpected argument %q (flags go before arguments; this command takes none)", c.Arg(0))
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	helpOutput = stdout
	err := dispatch(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the command printed its usage
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("", "no command given: one of %s", strings.Join(commands, ", "))
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
		return runLedger(ctx, args[1:], stdout, stderr)
	case "catchup":
		return runCatchUp(ctx, args[1:], stdout)
	case "version", "-version", "--version":
		c := newCommand("version", "", "Prints the build: version, commit, Go, and the platform.")
		if err := c.parse(args[1:]); err != nil {
			return err
		}
		if err := c.noArgs(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, versionString())
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return usagef("", "unknown command %q: one of %s", args[0], strings.Join(commands, ", "))
}

// versionString is the build: "amiss VERSION commit COMMIT GO OS/ARCH" (see package buildinfo).
func versionString() string {
	return fmt.Sprintf("amiss %s %s/%s", buildinfo.Read(), runtime.GOOS, runtime.GOARCH)
}
