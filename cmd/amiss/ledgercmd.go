package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/objstore"
)

// verifier is what both backends' handles offer to verify.
type verifier interface {
	ledger.Ledger
	verify(ctx context.Context, progress func(int, int64)) (ok bool, summary string, problems []string, err error)
}

type fileRoot struct{ *localfs.Ledger }

func (f fileRoot) verify(ctx context.Context, p func(int, int64)) (bool, string, []string, error) {
	v, err := f.Verify(ctx, p)
	return v.OK(), fmt.Sprintf("%d files decoded: %d rows, %d reports, %d subject records; capacity record counts %d", v.Files, v.Rows, v.Reports, v.Subjects, v.CapacityUsed), v.Problems, err
}

type s3Ledger struct{ *objstore.Ledger }

func (s s3Ledger) verify(ctx context.Context, p func(int, int64)) (bool, string, []string, error) {
	v, err := s.Verify(ctx, p)
	return v.OK(), fmt.Sprintf("%d objects decoded: %d rows, %d subject records; capacity shards count %d", v.Objects, v.Rows, v.Subjects, v.CapacityUsed), v.Problems, err
}

// openRoot opens the ledger an operator's -root names, a folder or s3://bucket/prefix/ (see
// wiring.OpenLedger), with the limits it records.
func openRoot(ctx context.Context, root string, prepare bool) (verifier, error) {
	l, err := wiring.OpenLedger(ctx, root, wiring.LedgerOptions{From: "-root", Folders: true, Prepare: prepare})
	if err != nil {
		return nil, err
	}
	switch l := l.(type) {
	case *localfs.Ledger:
		return fileRoot{l}, nil
	case *objstore.Ledger:
		return s3Ledger{l}, nil
	}
	l.Close()
	return nil, fmt.Errorf("%s: no verifier for a %T", root, l)
}

// progressBar draws a bar on w for long runs (at least 1,000 rows), at most every 1%.
func progressBar(w io.Writer) func(done int, total int64) {
	last := -1
	return func(done int, total int64) {
		if total < 1000 {
			return
		}
		pct := int(int64(done) * 100 / total)
		if pct > 100 {
			pct = 100
		}
		if pct == last {
			return
		}
		last = pct
		fmt.Fprintf(w, "\r[%-40s] %3d%% %d/%d rows", strings.Repeat("#", pct*40/100), pct, done, total)
		if pct == 100 {
			fmt.Fprintln(w)
		}
	}
}

func runLedger(ctx context.Context, sub string, args []string, out, errOut io.Writer) error {
	switch sub {
	case "list":
		return runList(ctx, args, out, errOut)
	case "republish":
		return runRepublish(ctx, args, out)
	case "s3-setup":
		return runS3Setup(ctx, args, out)
	}
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
			return fmt.Errorf("%w: inspect takes one key (64 hex digits, as logs and amiss ledger list print it)", errUsage)
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
		return enc.Encode(verdictOf(ctx, l, row))
	case "verify":
		l, err := openRoot(ctx, *root, false)
		if err != nil {
			return err
		}
		defer l.Close()
		ok, summary, problems, err := l.verify(ctx, progressBar(errOut))
		if err != nil {
			return err
		}
		fmt.Fprintln(out, summary)
		for _, p := range problems {
			fmt.Fprintln(out, "problem:", p)
		}
		if !ok {
			return fmt.Errorf("verify found %d problems", len(problems))
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
	fmt.Fprintf(out, "subject records %d (one per commit and status context published to, forgotten once no verdict can land on it)\n", st.Subjects)
	fmt.Fprintln(out, "retained rows by lifetime:")
	for _, k := range ledger.Lifetimes {
		fmt.Fprintf(out, "  %-9s %d  %s\n", k, st.ByLifetime[k], lifetimeNote[k])
	}
	fmt.Fprintf(out, "last day: %d admitted; next day: %d end their retention\n", st.AdmittedLastDay, st.EndingNextDay)
	if days, ok := st.DaysToFull(); ok {
		fmt.Fprintf(out, "projected full in %.1f days at this rate (%d of %d slots free)\n", days,
			max(0, st.Limits.RecordCap-st.CapacityUsed), st.Limits.RecordCap)
	} else {
		fmt.Fprintln(out, "projected full: never at this rate (the rows ending match the admissions)")
	}
	if st.Limits.RecordCap > 0 && float64(st.CapacityUsed) >= ledger.CapacityWarning*float64(st.Limits.RecordCap) {
		fmt.Fprintf(out, "warning: %d%% of the record cap is in use; at the cap new deliveries are refused (503)\n",
			100*st.CapacityUsed/st.Limits.RecordCap)
	}
	fmt.Fprintf(out, "high-water %s\n", st.HighWater.Format(time.RFC3339Nano))
	fmt.Fprintf(out, "limits: signed age %s, queue %s, future skew %s, subject %d B, report %d B\n",
		st.Limits.SignedAgeCeiling, st.Limits.QueueCeiling, st.Limits.FutureSkew, st.Limits.MaxSubjectBytes, st.Limits.MaxReportBytes)
	switch {
	case st.Limits.BodyAgeCeiling == 0:
		fmt.Fprintln(out, "body times: off (every body-only delivery keeps a permanent marker)")
	case !st.Limits.BodyTimesSince.IsZero():
		fmt.Fprintf(out, "body times: ceiling %s, adopted %s\n", st.Limits.BodyAgeCeiling, st.Limits.BodyTimesSince.Format(time.RFC3339))
	default:
		fmt.Fprintf(out, "body times: ceiling %s\n", st.Limits.BodyAgeCeiling)
	}
}

var lifetimeNote = map[ledger.Lifetime]string{
	ledger.LifetimePermanent: "(never forgotten: the signature proves no time)",
	ledger.LifetimeSigned:    "(a signed header time)",
	ledger.LifetimeBody:      "(a provider-set time in the signed body)",
}

// runS3Setup makes the bucket of an s3:// root fit for a ledger: versioning on, and a lifecycle
// rule that expires noncurrent versions (for a local MinIO, or a bucket made by hand).
func runS3Setup(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("ledger s3-setup", "-root s3://bucket/prefix/ [-noncurrent-days N]")
	root := fs.String("root", "", "the ledger's bucket and prefix, s3://bucket/prefix/")
	days := fs.Int("noncurrent-days", 1, "days a version is kept after it stopped being current")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	loc, err := wiring.ParseLocation(*root, "-root", false)
	if err != nil || loc.Bucket == "" {
		return fmt.Errorf("%w: s3-setup needs -root s3://bucket/prefix/, got %q", errUsage, *root)
	}
	client, err := wiring.S3Client(ctx, *root)
	if err != nil {
		return err
	}
	if err := objstore.SetupBucket(ctx, client, loc.Bucket, loc.Prefix, int32(*days)); err != nil {
		return err
	}
	fmt.Fprintf(out, "bucket %s: versioning enabled; versions under %q expire %d day(s) after they stop being current\n", loc.Bucket, loc.Prefix, *days)
	return nil
}
