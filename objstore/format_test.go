package objstore_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite objstore/testdata/format-vN for the current format")

// fixtureLimits are the limits every fixture ledger was created with.
func fixtureLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 50, SignedAgeCeiling: 5 * time.Minute, QueueCeiling: time.Hour,
		FutureSkew: time.Minute, MaxChangeBytes: 4 << 10, MaxReportBytes: 8 << 10}
}

var fixtureEpoch = time.Date(2026, 9, 1, 8, 0, 0, 0, time.UTC)

// fixtureDelivery is the i-th delivery of a fixture ledger: even ones signed, odd ones
// permanent.
func fixtureDelivery(i int) ledger.Delivery {
	body := []byte(strings.Repeat("y", i+1))
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

// fixtureReport is the verdict saved for delivery d.
func fixtureReport(d ledger.Delivery) string {
	return `{"state":"success","description":"fixture ` + d.Binding.Identity + `"}`
}

// writeFixture makes a ledger in the fixture's states on MinIO with the current code and
// copies every current object under its prefix into dir.
func writeFixture(t *testing.T, dir string) {
	ctx := context.Background()
	prefix := newPrefix(t)
	clock := ledger.NewManualClock(fixtureEpoch)
	l := openFixture(t, prefix, clock, true, rand.NewChaCha8([32]byte{'a', 'm', 'i', 's', 's'}))
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
		s := ledgertest.MustSave(t, l, *c.Lease, fixtureReport(d))
		switch want {
		case ledger.StateDone:
			ledgertest.MustComplete(t, l, s)
		case ledger.StateAbandoned:
			if err := l.Abandon(ctx, s, "provider answered 404"); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.RemoveAll(dir)
	for o := range minioRaw.ListObjects(ctx, testBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		obj, err := minioRaw.GetObject(ctx, testBucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(o.Key, prefix)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func openFixture(t *testing.T, prefix string, clock ledger.Clock, create bool, random io.Reader) *objstore.Ledger {
	t.Helper()
	l, err := openFixtureWith(prefix, clock, create, random, fixtureLimits())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// openFixtureWith opens a fixture ledger with the given limits.
func openFixtureWith(prefix string, clock ledger.Clock, create bool, random io.Reader, limits ledger.Limits) (*objstore.Ledger, error) {
	ctx := context.Background()
	// The fixture's clock is the store's: every answer's Date reports it, so a fixture is
	// written at its epoch whenever it is regenerated.
	tr := newTransport(&counter{})
	tr.setStoreClock(clock)
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		DisableClockSkewCorrection: true})
	if err != nil {
		return nil, err
	}
	return objstore.Open(ctx, objstore.Config{Client: client, Bucket: testBucket, Prefix: prefix, Limits: limits,
		Clock: clock, Create: create, Shards: 4, Random: random, Owner: "fixture-cleanup"})
}

// uploadFixture copies a fixture folder under a new prefix.
func uploadFixture(t *testing.T, src string) string {
	t.Helper()
	ctx := context.Background()
	prefix := newPrefix(t)
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "README.md" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		_, err = minioRaw.PutObject(ctx, testBucket, prefix+filepath.ToSlash(rel), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("upload fixture: %v", err)
	}
	return prefix
}

// TestReleasedFormatsOpen opens a copy of every released format's fixture ledger and works on
// it: every row reads back in its state, a saved result is published with its bytes, a new
// delivery is admitted and run, cleanup forgets the ended rows only and every subject record
// the older format wrote (found by the safety net's lap: nothing else points to them), and
// capacity matches the rows.
func TestReleasedFormatsOpen(t *testing.T) {
	requireMinIO(t)
	if *updateFixtures {
		writeFixture(t, filepath.Join("testdata", fmt.Sprintf("format-v%d", objstore.FormatVersion)))
	}
	dirs, _ := filepath.Glob(filepath.Join("testdata", "format-v*"))
	if len(dirs) == 0 {
		t.Fatal("no fixture ledgers under testdata")
	}
	for _, src := range dirs {
		t.Run(filepath.Base(src), func(t *testing.T) {
			ctx := context.Background()
			prefix := uploadFixture(t, src)
			clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
			l := openFixture(t, prefix, clock, false, nil)
			for i, want := range fixtureStates {
				d := fixtureDelivery(i)
				row, err := l.Inspect(ctx, d.Key())
				if err != nil || row.State != want || row.Binding != d.Binding {
					t.Fatalf("delivery %d: %+v %v, want %v", i, row, err, want)
				}
			}
			saved := fixtureDelivery(2)
			c := ledgertest.MustClaim(t, l, saved, ledger.Publish)
			if string(c.Staged.Report) != fixtureReport(saved) {
				t.Fatalf("staged report %q", c.Staged.Report)
			}
			ledgertest.MustComplete(t, l, *c.Staged)
			ledgertest.FinishRow(t, l, clock, fixtureDelivery(0))
			ledgertest.FinishRow(t, l, clock, fixtureDelivery(1))
			fresh := fixtureDelivery(len(fixtureStates)) // signed now: removed with the others
			fresh.SignedAt = clock.Now()
			ledgertest.MustAdmit(t, l, fresh)
			ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, fresh, ledger.Execute).Lease, fixtureReport(fresh)))
			records, _ := filepath.Glob(filepath.Join(src, "subjects", "*.json"))
			// Two days on, a run of cleanup (its lap finds what the older format wrote), then
			// another an hour later: the uploaded fixture's objects count as written when first
			// read, so its records are forgotten once the request life has passed since.
			var removed, forgotten int
			for _, at := range []time.Duration{48 * time.Hour, 49 * time.Hour} {
				clock.Set(fixtureEpoch.Add(at))
				for cur := ledger.Cursor(""); ; {
					rep, err := l.Cleanup(ctx, cur)
					if err != nil {
						t.Fatal(err)
					}
					removed += len(rep.Removed)
					forgotten += rep.RemovedSubjects
					if rep.Done {
						break
					}
					cur = rep.Next
				}
			}
			// The signed rows (0, 2, 4 and the new one) have ended; the permanent ones stay.
			if removed != 4 {
				t.Fatalf("cleanup removed %d rows, want the 4 signed ones", removed)
			}
			if forgotten != len(records) {
				t.Fatalf("cleanup forgot %d subject records, want the fixture's %d", forgotten, len(records))
			}
			for o := range minioRaw.ListObjects(ctx, testBucket, minio.ListObjectsOptions{Prefix: prefix + "subjects/", Recursive: true}) {
				t.Fatalf("%s is kept after cleanup (%v)", o.Key, o.Err)
			}
			st, err := l.Stats(ctx)
			if err != nil || st.Rows != 3 || st.CapacityUsed != 3 {
				t.Fatalf("stats after cleanup %+v %v", st, err)
			}
		})
	}
}
