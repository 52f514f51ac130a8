package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

func openRoot(ctx context.Context, dir string, prepare bool) (*localfs.Ledger, error) {
	limits, err := localfs.ReadLimits(dir, nil)
	if err != nil {
		return nil, err
	}
	cfg := localfs.Config{Limits: limits}
	if prepare {
		return localfs.Prepare(ctx, dir, cfg)
	}
	return localfs.Open(ctx, dir, cfg)
}

func runLedger(ctx context.Context, sub string, args []string, out, errOut io.Writer) error {
	fs, root, err := rootFlags("ledger "+sub, args)
	if err != nil {
		return err
	}
	switch sub {
	case "stats":
		l, err := openRoot(ctx, *root, false)
		if err != nil {
			return err
		}
		defer l.Close()
		st, err := l.Stats(ctx)
		if err != nil {
			return err
		}
		printStats(out, st)
		return nil
	case "inspect":
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: inspect takes one key (64 hex digits)", errUsage)
		}
		key, err := ledger.ParseKey(fs.Arg(0))
		if err != nil {
			return err
		}
		l, err := openRoot(ctx, *root, false)
		if err != nil {
			return err
		}
		defer l.Close()
		row, err := l.Inspect(ctx, key)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(row)
	case "verify":
		l, err := openRoot(ctx, *root, false)
		if err != nil {
			return err
		}
		defer l.Close()
		v, err := l.Verify(ctx, func(done int) {
			if done%10000 == 0 {
				fmt.Fprintf(errOut, "\rverified %d rows", done)
			}
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\r%d files decoded: %d rows, %d reports; capacity record counts %d\n", v.Files, v.Rows, v.Reports, v.CapacityUsed)
		for _, p := range v.Problems {
			fmt.Fprintln(out, "problem:", p)
		}
		if !v.OK() {
			return fmt.Errorf("verify found %d problems", len(v.Problems))
		}
		fmt.Fprintln(out, "ok")
		return nil
	case "cleanup":
		l, err := openRoot(ctx, *root, true)
		if err != nil {
			return err
		}
		defer l.Close()
		cur := ledger.Cursor("")
		var removed, retained, stranded, damaged int
		for {
			rep, err := l.Cleanup(ctx, cur)
			if err != nil {
				return err
			}
			removed += len(rep.Removed)
			retained += rep.Retained
			stranded += len(rep.Stranded)
			damaged += len(rep.Damaged)
			for _, d := range rep.Damaged {
				fmt.Fprintf(out, "damaged: %s: %v\n", d.Name, d.Err)
			}
			for _, s := range rep.Stranded {
				fmt.Fprintf(out, "stranded: %s %v since %s\n", s.Key, s.State, s.Since.Format(time.RFC3339))
			}
			if rep.Done {
				break
			}
			cur = rep.Next
		}
		fmt.Fprintf(out, "removed %d, retained %d, stranded %d, damaged %d\n", removed, retained, stranded, damaged)
		return nil
	}
	return fmt.Errorf("%w (unknown ledger command %q)", errUsage, sub)
}

func printStats(out io.Writer, st ledger.Stats) {
	fmt.Fprintf(out, "rows %d (capacity used %d of %d)\n", st.Rows, st.CapacityUsed, st.Limits.RecordCap)
	for _, s := range ledger.States {
		fmt.Fprintf(out, "  %-9s %d\n", s, st.ByState[s])
	}
	if st.Damaged > 0 {
		fmt.Fprintf(out, "  %-9s %d\n", "damaged", st.Damaged)
	}
	fmt.Fprintf(out, "high-water %s\n", st.HighWater.Format(time.RFC3339Nano))
	fmt.Fprintf(out, "limits: signed age %s, queue %s, future skew %s, subject %d B, report %d B\n",
		st.Limits.SignedAgeCeiling, st.Limits.QueueCeiling, st.Limits.FutureSkew, st.Limits.MaxSubjectBytes, st.Limits.MaxReportBytes)
}
