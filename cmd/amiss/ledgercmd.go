package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/operator"
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
	return v.OK(), fmt.Sprintf("%d files decoded: %d rows, %d subject records; capacity record counts %d", v.Files, v.Rows, v.Subjects, v.CapacityUsed), v.Problems, err
}

type s3Ledger struct{ *objstore.Ledger }

func (s s3Ledger) verify(ctx context.Context, p func(int, int64)) (bool, string, []string, error) {
	v, err := s.Verify(ctx, p)
	return v.OK(), fmt.Sprintf("%d objects decoded: %d rows, %d subject records; capacity shards count %d", v.Objects, v.Rows, v.Subjects, v.CapacityUsed), v.Problems, err
}

// openRoot opens the ledger an operator's -root names, a folder or s3://bucket/prefix/ (see
// wiring.OpenLedger), with the limits it records. A file root of an older format is refused,
// not migrated: only amiss ledger migrate migrates (openToMigrate).
func openRoot(ctx context.Context, root string, prepare bool) (verifier, error) {
	return open(ctx, root, wiring.LedgerOptions{From: "-root", Folders: true, Prepare: prepare, ReadOnly: true})
}

// openToMigrate opens the ledger as openRoot does, migrating a file root of an older format.
func openToMigrate(ctx context.Context, root string) (verifier, error) {
	return open(ctx, root, wiring.LedgerOptions{From: "-root", Folders: true})
}

func open(ctx context.Context, root string, o wiring.LedgerOptions) (verifier, error) {
	l, err := wiring.OpenLedger(ctx, root, o)
	if err != nil {
		return nil, explainRoot(root, false, err)
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

// A ledgerCommand is one subcommand of amiss ledger.
type ledgerCommand struct{ name, synopsis, about string }

// ledgerCommands are amiss ledger's subcommands, in the order its usage lists them.
var ledgerCommands = []ledgerCommand{
	{"stats", "[-root DIR]", "Counts rows by state and lifetime, the capacity in use, the high-water clock and the limits the root records."},
	{"list", "[-root DIR] [-state S]", "Lists rows, one a line, tab-separated: the full key (as logs print it and inspect and republish take it),\n" +
		"the state, the last transition, the route, and an abandoned row's reason."},
	{"inspect", "[-root DIR] KEY", "Prints one row as JSON, its change decoded (under the key \"subject\"), with the verdict it froze.\n" +
		"KEY is the row's full key: 64 hex digits, as logs, answers and amiss ledger list print it."},
	{"republish", "[-root DIR] [-queue URL] KEY | -abandoned [-since T]", "Revives an abandoned row (KEY), or every one (-abandoned), and queues it: the verdict it froze is\n" +
		"published again, the same bytes, never evaluated again."},
	{"verify", "[-root DIR]", "Decodes every file of the root and checks the capacity record; exits 1 when it finds a problem."},
	{"cleanup", "[-root DIR]", "Runs cleanup passes until a lap is done: forgets what is safe to forget, reports stranded and damaged rows."},
	{"s3-setup", "-root s3://bucket/prefix/ [-noncurrent-days N]", "Turns versioning on for the ledger's bucket and adds a lifecycle rule expiring noncurrent versions."},
	{"migrate", "[-root DIR]", "Migrates a file root of an older format to this build's, in place (docs/file-ledger.md, Formats). The other\n" +
		"ledger commands refuse such a root rather than change it; amiss serve and the Lambda functions migrate it when they open it."},
}

// ledgerNames lists the subcommands' names.
func ledgerNames() string {
	names := make([]string, len(ledgerCommands))
	for i, c := range ledgerCommands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// printLedgerUsage writes amiss ledger's usage: every subcommand's synopsis.
func printLedgerUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: amiss ledger SUBCOMMAND [flags]   (amiss ledger SUBCOMMAND -h for its flags)")
	fmt.Fprintln(w)
	for _, c := range ledgerCommands {
		fmt.Fprintf(w, "  amiss ledger %s %s\n", c.name, c.synopsis)
	}
	fmt.Fprintln(w, "\nDIR is a file root (default "+defaultRoot+", the one make run serves) or s3://bucket/prefix/.")
}

// newLedgerCommand returns the flag set of "amiss ledger name", with its -root flag.
func newLedgerCommand(name string) (*command, *string) {
	for _, lc := range ledgerCommands {
		if lc.name == name {
			c := newCommand("ledger "+name, lc.synopsis, lc.about)
			if name == "s3-setup" {
				return c, c.String("root", "", "the ledger's bucket and prefix, s3://bucket/prefix/")
			}
			return c, c.String("root", defaultRoot, "ledger root folder, or s3://bucket/prefix/")
		}
	}
	return nil, nil
}

func runLedger(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usagef("ledger", "no subcommand given: one of %s", ledgerNames())
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help", "help":
		printLedgerUsage(out)
		return nil
	}
	c, root := newLedgerCommand(sub)
	if c == nil {
		return usagef("ledger", "unknown subcommand %q: one of %s", sub, ledgerNames())
	}
	args = args[1:]
	switch sub {
	case "list":
		return runList(ctx, c, root, args, out, errOut)
	case "republish":
		return runRepublish(ctx, c, root, args, out)
	case "s3-setup":
		return runS3Setup(ctx, c, root, args, out)
	}
	if err := c.parse(args); err != nil {
		return err
	}
	if sub != "inspect" {
		if err := c.noArgs(); err != nil {
			return err
		}
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
		key, err := keyArg(c)
		if err != nil {
			return err
		}
		l, err := openRoot(ctx, *root, false)
		if err != nil {
			return err
		}
		defer l.Close()
		row, err := l.Inspect(ctx, key)
		if errors.Is(err, ledger.ErrUnknownDelivery) {
			return fmt.Errorf("no row %s in %s: never admitted there, or forgotten once its retention ended; amiss ledger list -root %s lists the keys: %w",
				key, *root, *root, err)
		}
		if err != nil {
			return err
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(operator.WithVerdict(ctx, l, row))
	case "migrate":
		return runMigrate(ctx, *root, out)
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
	}
	// cleanup
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

// keyArg reads the one KEY argument of inspect or republish.
func keyArg(c *command) (ledger.Key, error) {
	if c.NArg() != 1 {
		return ledger.Key{}, c.usagef("give one KEY, the row's full key (64 hex digits, as logs, answers and amiss ledger list print it); got %d arguments", c.NArg())
	}
	key, err := ledger.ParseKey(c.Arg(0))
	if err != nil {
		return ledger.Key{}, c.usagef("KEY %q: %v; give the row's full key, as logs, answers and amiss ledger list print it", c.Arg(0), err)
	}
	return key, nil
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
	fmt.Fprintf(out, "limits: signed age %s, queue %s, future skew %s, change %d B, report %d B\n",
		st.Limits.SignedAgeCeiling, st.Limits.QueueCeiling, st.Limits.FutureSkew, st.Limits.MaxChangeBytes, st.Limits.MaxReportBytes)
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
func runS3Setup(ctx context.Context, c *command, root *string, args []string, out io.Writer) error {
	days := c.Int("noncurrent-days", 1, "days a version is kept after it stopped being current")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	loc, err := wiring.ParseLocation(*root, "-root", false)
	if err != nil || loc.Bucket == "" {
		return c.usagef("give -root s3://bucket/prefix/ (got %q)", *root)
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

// runMigrate migrates the file root named root to this build's format, and says what it did.
func runMigrate(ctx context.Context, root string, out io.Writer) error {
	loc, err := wiring.ParseLocation(root, "-root", true)
	if err != nil {
		return err
	}
	if loc.Bucket != "" {
		fmt.Fprintf(out, "%s: an S3 ledger reads every earlier format in place (its first cleanup pass after an upgrade looks at what the earlier format wrote): nothing to migrate\n", root)
		return nil
	}
	before, _ := wiring.FileRootFormat(loc.Dir)
	l, err := openToMigrate(ctx, root)
	if err != nil {
		return err
	}
	l.Close()
	after, err := wiring.FileRootFormat(loc.Dir)
	switch {
	case err != nil:
		return err
	case before == after:
		fmt.Fprintf(out, "%s is of format %d, this build's: nothing to migrate\n", root, after)
	default:
		fmt.Fprintf(out, "migrated %s from format %d to format %d\n", root, before, after)
	}
	return nil
}
