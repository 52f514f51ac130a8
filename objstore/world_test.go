package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// The world the S3 ledger's tests share: one ledger prefix on the test MinIO, a store clock the
// test moves (the Date of every answer, the ledger's only clock), and handles on it, each with
// its own transport (one per process) and a host clock of its own; and matchers that pick one
// request out of a handle's traffic.

// offsetClock is a host's clock: another clock moved by a fixed skew.
type offsetClock struct {
	base ledger.Clock
	skew time.Duration
}

func (c offsetClock) Now() time.Time { return c.base.Now().Add(c.skew) }

// world is one ledger prefix with a store whose clock the test moves (the Date of every
// answer), and handles on it, each with its own transport and a host clock of its own.
type world struct {
	t      *testing.T
	ctx    context.Context
	bucket string
	prefix string
	store  *ledger.ManualClock
	limits ledger.Limits
	shards int
	seq    int
}

func newWorld(t *testing.T) *world {
	requireMinIO(t)
	t.Parallel()
	return &world{t: t, ctx: context.Background(), bucket: testBucket, prefix: newPrefix(t), store: ledger.NewManualClock(ledgertest.Epoch),
		limits: ledgertest.Limits(), shards: 4}
}

// handle opens a handle whose host clock is skew away from the store's.
func (w *world) handle(name string, skew time.Duration, adjust func(*objstore.Config)) (*objstore.Ledger, *transport) {
	w.t.Helper()
	l, tr, err := w.open(name, skew, adjust)
	if err != nil {
		w.t.Fatalf("open %s: %v", name, err)
	}
	return l, tr
}

// open opens a handle as handle does, and answers Open's error.
func (w *world) open(name string, skew time.Duration, adjust func(*objstore.Config)) (*objstore.Ledger, *transport, error) {
	return w.openVia(name, skew, nil, adjust)
}

// openVia opens a handle as open does, its requests passing through what via puts in front
// of the handle's transport (nil: nothing).
func (w *world) openVia(name string, skew time.Duration, via func(*transport) http.RoundTripper,
	adjust func(*objstore.Config)) (*objstore.Ledger, *transport, error) {
	w.t.Helper()
	tr := newTransport(&counter{})
	tr.setStoreClock(w.store)
	var rt http.RoundTripper = tr
	if via != nil {
		rt = via(tr)
	}
	client, err := objstore.NewClient(w.ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: rt, Timeout: 2 * time.Minute},
		Retryer: fastRetryer, DisableClockSkewCorrection: true})
	if err != nil {
		w.t.Fatal(err)
	}
	// A pass removes a row as soon as its retention ends (persisting the high-water each
	// time), so that a test's removals follow its clock.
	cfg := objstore.Config{Client: client, Bucket: w.bucket, Prefix: w.prefix, Limits: w.limits,
		Clock: offsetClock{w.store, skew}, Create: true, Shards: w.shards, Owner: name, HighWaterEvery: -1}
	if adjust != nil {
		adjust(&cfg)
	}
	l, err := objstore.Open(w.ctx, cfg)
	return l, tr, err
}

// delivery makes a new delivery signed at signedAt (zero: permanent).
func (w *world) delivery(signedAt time.Time) ledger.Delivery {
	w.seq++
	body := fmt.Appendf(nil, `{"safety":%d}`, w.seq)
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	return ledger.Delivery{Binding: ledger.Binding{Route: "safety", Scheme: scheme, Identity: fmt.Sprintf("%s-%d", w.prefix, w.seq),
		BodyDigest: ledger.SumBody(body)}, Change: body, SignedAt: signedAt}
}

func (w *world) admit(l ledger.Ledger, d ledger.Delivery, want ledger.AdmitOutcome) {
	w.t.Helper()
	a, err := l.Admit(w.ctx, d)
	if err != nil || a.Outcome != want {
		w.t.Fatalf("admit %s: %v %v, want %v", d.Binding.Identity, a.Outcome, err, want)
	}
}

// saved admits d and brings it to saved under l, returning the staged result.
func (w *world) saved(l ledger.Ledger, d ledger.Delivery, report string) ledger.Staged {
	w.t.Helper()
	w.admit(l, d, ledger.Admitted)
	return ledgertest.MustSave(w.t, l, *ledgertest.MustClaim(w.t, l, d, ledger.Execute).Lease, report)
}

// cleanLap runs cleanup passes on l until a lap is done, answering what they removed and found
// damaged.
func (w *world) cleanLap(l ledger.Ledger) ledger.CleanupReport {
	w.t.Helper()
	var all ledger.CleanupReport
	for cur, i := ledger.Cursor(""), 0; ; i++ {
		if i > 100 {
			w.t.Fatalf("cleanup never finished a lap")
		}
		rep, err := l.Cleanup(w.ctx, cur)
		if err != nil {
			w.t.Fatalf("cleanup: %v", err)
		}
		all.Removed = append(all.Removed, rep.Removed...)
		all.Damaged = append(all.Damaged, rep.Damaged...)
		if rep.Done {
			return all
		}
		cur = rep.Next
	}
}

// exact checks that the capacity record counts the rows stored, no more and no less.
func (w *world) exact(l ledger.Ledger) ledger.Stats {
	w.t.Helper()
	st, err := l.Stats(w.ctx)
	if err != nil {
		w.t.Fatalf("stats: %v", err)
	}
	if st.CapacityUsed != st.Rows {
		w.t.Fatalf("capacity records %d slots for %d rows (cap %d)", st.CapacityUsed, st.Rows, st.Limits.RecordCap)
	}
	return st
}

type admitResult struct {
	a   ledger.Admission
	err error
}

// rowRequest matches a request on the row object of d with the given method; for DELETE, a
// delete of it alone or in a batch delete (POST ?delete naming it).
func rowRequest(d ledger.Delivery, method string) func(*http.Request, []byte) bool {
	name := objstore.RowName(d.Key())
	return func(r *http.Request, body []byte) bool {
		if method == http.MethodDelete && isBatchDelete(r) {
			return bytes.Contains(body, []byte(name+"</Key>"))
		}
		return r.Method == method && strings.HasSuffix(r.URL.Path, "/"+name)
	}
}

// isBatchDelete reports a DeleteObjects request (POST ?delete).
func isBatchDelete(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("delete")
}

// rowWrite matches the write of d's row in the given state (not a reservation of its key).
func rowWrite(d ledger.Delivery, state ledger.State) func(*http.Request, []byte) bool {
	put := rowRequest(d, http.MethodPut)
	return func(r *http.Request, body []byte) bool {
		return put(r, body) && bytes.Contains(body, []byte(`"state":"`+state.String()+`"`))
	}
}

func objectKind(kind string) func(*http.Request, []byte) bool {
	return func(_ *http.Request, body []byte) bool { return bytes.Contains(body, []byte(`"kind":"`+kind+`"`)) }
}

func putOf(kind string) func(*http.Request, []byte) bool {
	return func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPut && bytes.Contains(body, []byte(`"kind":"`+kind+`"`))
	}
}

func both(a, b func(*http.Request, []byte) bool) func(*http.Request, []byte) bool {
	return func(r *http.Request, body []byte) bool { return a(r, body) && b(r, body) }
}
