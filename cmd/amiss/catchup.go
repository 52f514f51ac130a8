package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
)

// runCatchUp is `amiss catchup`: one catch-up run for every route that opted in (the cleanup
// schedule runs the same), or with -status each hook's cursor and last run.
func runCatchUp(ctx context.Context, args []string, out io.Writer) error {
	c := newCommand("catchup", "[-config FILE] [-root ROOT] [-status]",
		"Asks the providers again for the webhook deliveries that failed (docs/catchup.md), for every route with a catchup block; "+
			"with -status, prints each hook's cursor and last run instead.")
	cfgPath := c.String("config", defaultConfig, "configuration file")
	root := c.String("root", defaultRoot, "ledger root folder, or s3://bucket/prefix/")
	status := c.Bool("status", false, "print each hook's cursor and last run, asking for nothing")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, os.Getenv)
	if err != nil {
		return err
	}
	l, err := wiring.OpenLedger(ctx, *root, wiring.LedgerOptions{From: "-root", Folders: true})
	if err != nil {
		return explainRoot(*root, false, err)
	}
	defer l.Close()
	st, ok := l.(ledger.StateStore)
	if !ok {
		return fmt.Errorf("%s: a %T keeps no catch-up cursor", *root, l)
	}
	sources, err := catchup.Sources(ctx, cfg, wiring.Secrets(nil), nil)
	if err != nil {
		return err
	}
	if len(sources) == 0 {
		fmt.Fprintln(out, "no route has a catchup block: nothing to catch up (docs/catchup.md)")
		return nil
	}
	if *status {
		for _, s := range sources {
			cur, version, err := catchup.ReadCursor(ctx, st, s.Name())
			if err != nil {
				return err
			}
			printCursor(out, s, cur, version)
		}
		return nil
	}
	r := &catchup.Runner{State: st}
	reps, err := r.RunAll(ctx, sources)
	for _, rep := range reps {
		printReport(out, rep)
	}
	return err
}

func printCursor(out io.Writer, s catchup.Source, cur catchup.Cursor, version string) {
	fmt.Fprintf(out, "%s (cursor %s)\n", s.Describe(), s.Name())
	if version == "" {
		fmt.Fprintln(out, "  never run")
		return
	}
	fmt.Fprintf(out, "  judged through  %s\n  following       %d failed deliveries\n", cur.Through.UTC().Format(time.RFC3339), len(cur.Open))
	for d, o := range cur.Open {
		fmt.Fprintf(out, "    %s  %s %s  first %s  asked %d times\n", d, o.Event, o.Repo, o.First.UTC().Format(time.RFC3339), o.Asks)
	}
	if cur.Last != nil {
		fmt.Fprint(out, "  last run: ")
		printReport(out, *cur.Last)
	}
}

func printReport(out io.Writer, rep catchup.Report) {
	fmt.Fprintf(out, "%s at %s: listed %d, found failed %d, redelivered %d, resolved %d, given up %d, following %d",
		rep.Hook, rep.At.UTC().Format(time.RFC3339), rep.Listed, rep.Found, rep.Asked, rep.Resolved, rep.Lost, rep.Open)
	switch {
	case rep.Cut && !rep.UnreadTo.IsZero():
		fmt.Fprintf(out, " (listing cut at its page bound: the cursor moved on; the attempts from %s to %s were not read and are not redelivered)",
			rep.UnreadFrom.UTC().Format(time.RFC3339), rep.UnreadTo.UTC().Format(time.RFC3339))
	case rep.Cut:
		fmt.Fprint(out, " (listing cut: the cursor did not move)")
	}
	if !rep.WaitUntil.IsZero() {
		fmt.Fprintf(out, " (the provider asked to wait: nothing is sent to it before %s)", rep.WaitUntil.UTC().Format(time.RFC3339))
	}
	if rep.Error != "" {
		fmt.Fprintf(out, "; error: %s", rep.Error)
	}
	fmt.Fprintln(out)
}
