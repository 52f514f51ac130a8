package localfs_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
)

var updateFixtures = flag.Bool("update-fixtures", false, "write localfs/testdata/format-vN for the current format N (released fixtures are never rewritten)")

// fixtureLimits are the limits every fixture root was created with.
func fixtureLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 50, SignedAgeCeiling: 5 * time.Minute, QueueCeiling: time.Hour,
		FutureSkew: time.Minute, MaxChangeBytes: 4 << 10, MaxReportBytes: 8 << 10}
}

var fixtureEpoch = time.Date(2026, 9, 1, 8, 0, 0, 0, time.UTC)

// fixtureDelivery is the i-th delivery of a fixture root: even ones signed, odd ones permanent.
func fixtureDelivery(i int) ledger.Delivery {
	body := []byte(strings.Repeat("x", i+1))
	d := ledger.Delivery{
		Binding: ledger.Binding{Route: "fixture", Scheme: "github-sha256", Identity: "delivery-" + string(rune('a'+i)),
			BodyDigest: ledger.SumBody(body)},
		Change: []byte(`{"repository":"acme/app","sha":"` + strings.Repeat(string(rune('0'+i)), 40) + `"}`),
	}
	if i%2 == 0 {
		d.Binding.Scheme = "standard-webhooks"
		d.SignedAt = fixtureEpoch
	}
	return d
}

// The states of the six fixture deliveries, in order.
var fixtureStates = []ledger.State{ledger.StatePending, ledger.StateRunning, ledger.StateSaved,
	ledger.StateDone, ledger.StateDone, ledger.StateAbandoned}

func writeFixture(t *testing.T, dir string) {
	ctx := context.Background()
	os.RemoveAll(dir)
	os.MkdirAll(filepath.Dir(dir), 0o755)
	clock := ledger.NewManualClock(fixtureEpoch)
	rnd := rand.NewChaCha8([32]byte{'a', 'm', 'i', 's', 's'})
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: fixtureLimits(), Clock: clock, Create: true, Random: rnd})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, want := range fixtureStates {
		d := fixtureDelivery(i)
		ledgertest.MustAdmit(t, l, d)
		if want == ledger.StatePending {
			continue
		}
		c := ledgertest.MustClaim(t, l, d, ledger.Execute)
		if want == ledger.StateRunning {
			continue
		}
		s := ledgertest.MustSave(t, l, *c.Lease, `{"state":"success","description":"fixture `+d.Binding.Identity+`"}`)
		switch want {
		case ledger.StateDone:
			ledgertest.MustComplete(t, l, s)
		case ledger.StateAbandoned:
			if err := l.Abandon(ctx, s, "provider answered 404"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Lock files are made by whoever opens the root; they are not part of a format.
	matches, _ := filepath.Glob(filepath.Join(dir, "*.lock"))
	for _, m := range matches {
		os.Remove(m)
	}
}

// TestReleasedFormatsOpen opens a copy of every released format's fixture root and works on
// it: every row reads back in its state, a saved result is published with its bytes, cleanup
// forgets the ended rows only, and the root verifies clean.
func TestReleasedFormatsOpen(t *testing.T) {
	if *updateFixtures {
		writeFixture(t, filepath.Join("testdata", fmt.Sprintf("format-v%d", localfs.FormatVersion)))
	}
	dirs := releasedFixtures(t)
	for _, src := range dirs {
		t.Run(filepath.Base(src), func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "root")
			copyTree(t, src, dir)
			limits, err := localfs.ReadLimits(dir, nil)
			if err != nil || limits != fixtureLimits() {
				t.Fatalf("limits %+v %v", limits, err)
			}
			clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
			l, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: limits, Clock: clock})
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			defer l.Close()
			if v, err := l.Verify(ctx, nil); err != nil || !v.OK() {
				t.Fatalf("verify: %v %v", err, v.Problems)
			}
			for i, want := range fixtureStates {
				d := fixtureDelivery(i)
				row, err := l.Inspect(ctx, d.Key())
				if err != nil || row.State != want || row.Binding != d.Binding {
					t.Fatalf("delivery %d: %+v %v, want %v", i, row, err, want)
				}
			}
			saved := fixtureDelivery(2)
			c := ledgertest.MustClaim(t, l, saved, ledger.Publish)
			if want := `{"state":"success","description":"fixture ` + saved.Binding.Identity + `"}`; string(c.Staged.Report) != want {
				t.Fatalf("staged report %q", c.Staged.Report)
			}
			ledgertest.MustComplete(t, l, *c.Staged)
			ledgertest.FinishRow(t, l, clock, fixtureDelivery(0))
			ledgertest.FinishRow(t, l, clock, fixtureDelivery(1))
			clock.Set(fixtureEpoch.Add(48 * time.Hour))
			rep, err := l.Cleanup(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			// The signed rows (0, 2, 4) have ended; the permanent ones stay.
			if len(rep.Removed) != 3 {
				t.Fatalf("cleanup removed %d rows, want the 3 signed ones", len(rep.Removed))
			}
			st, err := l.Stats(ctx)
			if err != nil || st.Rows != 3 || st.CapacityUsed != 3 {
				t.Fatalf("stats after cleanup %+v %v", st, err)
			}
		})
	}
}

// retiredFixtures are the roots of the retired formats, which no release wrote (format.go):
// they are refused, never opened.
var retiredFixtures = map[string]int{filepath.Join("testdata", "format-v1"): 1, filepath.Join("testdata", "format-v3"): 3}

// releasedFixtures are the fixture roots of every released format, the retired ones left out.
func releasedFixtures(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join("testdata", "format-v*"))
	dirs = slices.DeleteFunc(dirs, func(d string) bool { _, retired := retiredFixtures[d]; return retired })
	if len(dirs) == 0 {
		t.Fatal("no fixture roots under testdata")
	}
	return dirs
}

// TestRetiredFormatsAreRefused: a root of a retired format (format 1's one capacity record,
// format 3's admission logs, and files framed as that format) fails closed at Open, Prepare and
// ReadLimits with ErrRootMismatch, an error that names the root state, says what the format
// was and what to do; nothing of the root is changed.
func TestRetiredFormatsAreRefused(t *testing.T) {
	for fixture, format := range retiredFixtures {
		t.Run(filepath.Base(fixture), func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "root")
			copyTree(t, fixture, dir)
			before := treeDigest(t, dir)
			state := filepath.Join(dir, localfs.RootFile)
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ledger.ErrRootMismatch) {
					t.Fatalf("%s of a format %d root: %v, want ErrRootMismatch", what, format, err)
				}
				for _, want := range []string{state, fmt.Sprintf("format %d", format), "no release", "create a new one"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("%s of a format %d root: %q does not say %q", what, format, err, want)
					}
				}
			}
			cfg := localfs.Config{Limits: fixtureLimits(), Clock: ledger.NewManualClock(fixtureEpoch.Add(time.Hour))}
			_, err := localfs.Open(ctx, dir, cfg)
			check("open", err)
			_, err = localfs.Prepare(ctx, dir, cfg)
			check("prepare", err)
			_, err = localfs.ReadLimits(dir, nil)
			check("reading the limits", err)
			cfg.Create = true
			_, err = localfs.Open(ctx, dir, cfg)
			check("open with Create", err)
			if after := treeDigest(t, dir); !maps.Equal(before, after) {
				t.Fatalf("refusing a format %d root changed it", format)
			}
		})
	}
}

// treeDigest maps every file under dir but the lock files (made by whoever opens a root) to
// its bytes.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".lock") {
			return err
		}
		data, err := os.ReadFile(p)
		out[p] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatalf("copy fixture: %v", err)
	}
}

// TestReleasedFormatsAdoptBodyTimes: a root created before body times (every fixture), opened
// with a body-age ceiling, records the ceiling and when it adopted it, once; its rows keep the
// lifetimes they were written with; no body-time row ends within BodyPolicyGrace of the
// adoption; a handle opened before the adoption stops at its next decision by time rather than
// act under the older policy; every other change of the recorded ceiling fails closed.
func TestReleasedFormatsAdoptBodyTimes(t *testing.T) {
	for _, src := range releasedFixtures(t) {
		t.Run(filepath.Base(src), func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "root")
			copyTree(t, src, dir)
			at := fixtureEpoch.Add(time.Hour)
			clock := ledger.NewManualClock(at)
			older, err := localfs.Open(ctx, dir, localfs.Config{Limits: fixtureLimits(), Clock: clock})
			if err != nil {
				t.Fatalf("open under the older policy: %v", err)
			}
			defer older.Close()
			withBody := fixtureLimits()
			withBody.BodyAgeCeiling = 96 * time.Hour
			l, err := localfs.Open(ctx, dir, localfs.Config{Limits: withBody, Clock: clock})
			if err != nil {
				t.Fatalf("open with a body-age ceiling: %v", err)
			}
			defer l.Close()
			recorded, err := localfs.ReadLimits(dir, nil)
			if err != nil || recorded.BodyAgeCeiling != withBody.BodyAgeCeiling || !recorded.BodyTimesSince.Equal(at) {
				t.Fatalf("recorded limits %+v %v, want the ceiling adopted at %v", recorded, err, at)
			}
			st, err := l.Stats(ctx)
			if err != nil || st.ByLifetime[ledger.LifetimeSigned] != 3 || st.ByLifetime[ledger.LifetimePermanent] != 3 {
				t.Fatalf("lifetimes after adoption %v %v, want the rows as written", st.ByLifetime, err)
			}
			// A body made long ago would end at once by its time; the grace keeps it an hour.
			body := []byte(`{"repository":{"pushed_at":1}}`)
			d := ledger.Delivery{Binding: ledger.Binding{Route: "fixture", Scheme: "github-sha256", Identity: ledger.SumBody(body).String(),
				BodyDigest: ledger.SumBody(body)}, Change: []byte(`{"sha":"1"}`), BodyAt: at.Add(-95 * time.Hour)}
			a, err := l.Admit(ctx, d)
			if err != nil || a.Outcome != ledger.Admitted || a.Lifetime != ledger.LifetimeBody {
				t.Fatalf("body-time admission %+v %v", a, err)
			}
			if want := at.Add(ledger.BodyPolicyGrace); a.RetainUntil.Before(want) {
				t.Fatalf("a body-time row retained until %v, before the adoption's grace ends at %v", a.RetainUntil, want)
			}
			// The handle opened before the adoption stops at its next decision by time.
			if _, err := older.Admit(ctx, fixtureDelivery(0)); !errors.Is(err, ledger.ErrRootMismatch) {
				t.Fatalf("a handle of the older policy admitted after the adoption: %v, want ErrRootMismatch", err)
			}
			// Opening again with the same ceiling keeps the adoption time; any other fails closed.
			clock.Advance(time.Hour)
			again, err := localfs.Open(ctx, dir, localfs.Config{Limits: withBody, Clock: clock})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			again.Close()
			if recorded, _ := localfs.ReadLimits(dir, nil); !recorded.BodyTimesSince.Equal(at) {
				t.Fatalf("reopening moved the adoption time to %v", recorded.BodyTimesSince)
			}
			for _, ceiling := range []time.Duration{0, 48 * time.Hour} {
				other := fixtureLimits()
				other.BodyAgeCeiling = ceiling
				if _, err := localfs.Open(ctx, dir, localfs.Config{Limits: other, Clock: clock}); !errors.Is(err, ledger.ErrRootMismatch) {
					t.Fatalf("open with a body-age ceiling of %v: %v, want ErrRootMismatch", ceiling, err)
				}
			}
		})
	}
}

func frameVersion(t *testing.T, p string) uint16 {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return localfs.FrameVersionForTest(data)
}

// TestNewerFormatFailsClosed: a file written by a newer format (a row, a capacity shard, the
// root state) is never read as if it were this one: the operation that meets it fails with
// ErrRootMismatch naming the file, and nothing is written.
func TestNewerFormatFailsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{})
	defer l.Close()
	d := deliveryInShard(0x21)
	ledgertest.MustAdmit(t, l, d)
	state := filepath.Join(dir, localfs.RowsDir, "21", d.Key().String()+".state")
	if err := bumpVersion(filepath.Join(localfs.RowsDir, "21", d.Key().String()+".state"))(dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(state)
	if _, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w", time.Minute); !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), state) {
		t.Fatalf("claim of a newer-format row: %v", err)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Fatalf("a newer-format row was rewritten")
	}
	shard := filepath.Join(dir, shardFile(0x21))
	data, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, localfs.ReframeShardForTest(data, localfs.FormatVersion+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, deliveryInShard(0x21)); !errors.Is(err, ledger.ErrRootMismatch) || !strings.Contains(err.Error(), shardFile(0x21)) {
		t.Fatalf("admission into a newer-format capacity shard: %v", err)
	}
}

// TestFormat2MigrationWaitsForTheClockLock: the migration rewrites the root state, so it takes
// the lock every other writer of the root state holds (a format 2 process records body times
// or persists its high-water under the clock lock): while another holds it, opening a format 2
// root waits, answers ErrBusy, and leaves the root state as format 2 wrote it.
func TestFormat2MigrationWaitsForTheClockLock(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	copyTree(t, filepath.Join("testdata", "format-v2"), dir)
	release, err := localfs.HoldLockForTest(ctx, dir, localfs.ClockLock)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, err = localfs.Open(ctx, dir, localfs.Config{Limits: fixtureLimits(), LockWait: 100 * time.Millisecond})
	if !errors.Is(err, ledger.ErrBusy) {
		t.Fatalf("open of a format 2 root while the clock lock is held: %v, want ErrBusy", err)
	}
	if v := frameVersion(t, filepath.Join(dir, localfs.RootFile)); v != 2 {
		t.Fatalf("root state of format %d, want the format 2 one untouched", v)
	}
	release()
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: fixtureLimits()})
	if err != nil {
		t.Fatalf("open once the clock lock is free: %v", err)
	}
	l.Close()
	if v := frameVersion(t, filepath.Join(dir, localfs.RootFile)); v != localfs.FormatVersion {
		t.Fatalf("root state of format %d after the migration", v)
	}
}
