// Command amiss is the local entry point of the amiss delivery controller.
//
//	amiss serve  [-config FILE] [-root DIR] [-listen ADDR] [-stranded-after D]
//	                                      the three handlers in one process over a file root;
//	                                      unfinished rows are queued again at start
//	amiss sign   [-config FILE] [-route NAME] [-title T]
//	                                      print a curl command sending a signed webhook
//	amiss demo   [-root DIR]              run a sample delivery through every state on a file root
//	amiss ledger stats   [-root DIR]      counts by state, capacity, high-water clock
//	                                      (DIR: a file root, or s3://bucket/prefix/)
//	amiss ledger list    [-root DIR] [-state S]
//	                                      full keys by state, one row a line
//	amiss ledger inspect [-root DIR] KEY  one row, as JSON, with the verdict it froze
//	amiss ledger republish [-root DIR] [-queue URL] KEY | -abandoned [-since T]
//	                                      revive abandoned verdicts (same bytes) and queue them
//	amiss ledger verify  [-root DIR]      decode every file and check the capacity record
//	amiss ledger cleanup [-root DIR]      run cleanup passes until a lap is done
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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

var errUsage = errors.New("usage: amiss serve|sign|demo|ledger stats|list|inspect|republish|verify|cleanup (amiss COMMAND -h for its flags)")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	case "ledger":
		if len(args) < 2 {
			return errUsage
		}
		return runLedger(ctx, args[1], args[2:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, errUsage.Error())
		return nil
	}
	return fmt.Errorf("%w (unknown command %q)", errUsage, args[0])
}

func rootFlags(name string, args []string) (*flag.FlagSet, *string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	root := fs.String("root", defaultRoot, "ledger root folder, or s3://bucket/prefix/")
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return fs, root, nil
}
