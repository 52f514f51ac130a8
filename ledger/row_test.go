package ledger_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite ledger/testdata/row-v1.json")

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

const leaseFor = 30 * time.Second

// rowIn builds a row in the named situation at t0 (a lease is live until t0+leaseFor unless the
// situation says it ended).
func rowIn(t *testing.T, situation string) (ledger.Row, ledger.Lease) {
	t.Helper()
	l := ledger.DefaultLimits()
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "standard-webhooks", Identity: "i"},
		Change: []byte(`{"sha":"0"}`), SignedAt: t0}
	r, o, err := ledger.NewRow(d, l, t0, "e1")
	if err != nil || o != ledger.Admitted {
		t.Fatalf("new row: %v %v", o, err)
	}
	if situation == "pending" {
		return r, ledger.Lease{}
	}
	c, err := r.Claim(d.Binding.Digest(), "w", leaseFor, t0)
	if err != nil || c.Outcome != ledger.Execute {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	lease := *c.Lease
	if situation == "running" {
		return r, lease
	}
	publish, _, err := r.Save(lease, ledger.ReportRef{Digest: ledger.SumBody([]byte("rep")), Size: 3}, t0)
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	switch situation {
	case "saved":
		return r, publish
	case "done":
		if _, err := r.Complete(ledger.Staged{Lease: publish, Report: []byte("rep")}, t0); err != nil {
			t.Fatal(err)
		}
	case "abandoned":
		if _, err := r.Abandon(ledger.Staged{Lease: publish, Report: []byte("rep")}, "refused", t0); err != nil {
			t.Fatal(err)
		}
	case "superseded":
		if _, err := r.Supersede(ledger.Staged{Lease: publish, Report: []byte("rep")}, ledger.Key{9}, t0); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown situation %q", situation)
	}
	return r, publish
}

// TestRowTransitions is the state machine as a table: for each state, each operation with the
// row's own lease, inside the lease (at t0+1s) and after it (at t0+1m): the answer, and the
// state the row is left in.
func TestRowTransitions(t *testing.T) {
	const (
		execute   = "execute"
		publish   = "publish"
		busy      = "busy"
		duplicate = "duplicate"
		lost      = "lease-lost"
		invalid   = "invalid"
		ok        = "ok"
		nothing   = "ok, unchanged"
	)
	type op struct {
		name string
		do   func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error)
	}
	digest := ledger.Binding{Route: "r", Scheme: "standard-webhooks", Identity: "i"}.Digest()
	answer := func(changed bool, err error) (string, error) {
		switch {
		case errors.Is(err, ledger.ErrLeaseLost):
			return lost, nil
		case errors.Is(err, ledger.ErrInvalid):
			return invalid, nil
		case err != nil:
			return "", err
		case changed:
			return ok, nil
		}
		return nothing, nil
	}
	ops := []op{
		{"claim", func(r *ledger.Row, _ ledger.Lease, now time.Time) (string, error) {
			c, err := r.Claim(digest, "other", leaseFor, now)
			return c.Outcome.String(), err
		}},
		{"renew", func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error) {
			_, changed, err := r.Renew(l, leaseFor, now)
			return answer(changed && err == nil, err)
		}},
		{"save", func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error) {
			l.Phase = ledger.PhaseExecute
			_, changed, err := r.Save(l, ledger.ReportRef{Digest: ledger.SumBody([]byte("other")), Size: 5}, now)
			return answer(changed && err == nil, err)
		}},
		{"complete", func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error) {
			return answer(r.Complete(ledger.Staged{Lease: l, Report: []byte("rep")}, now))
		}},
		{"abandon", func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error) {
			changed, err := r.Abandon(ledger.Staged{Lease: l, Report: []byte("rep")}, "gone", now)
			return answer(changed && err == nil, err)
		}},
		{"release", func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error) {
			return answer(true, r.Release(l, time.Time{}, now))
		}},
		{"revive", func(r *ledger.Row, _ ledger.Lease, now time.Time) (string, error) {
			return answer(r.Revive("", now))
		}},
		{"supersede", func(r *ledger.Row, l ledger.Lease, now time.Time) (string, error) {
			return answer(r.Supersede(ledger.Staged{Lease: l, Report: []byte("rep")}, ledger.Key{7}, now))
		}},
	}
	type want struct{ answer, state string }
	// rows: situation -> op -> {inside the lease, after it}
	table := map[string]map[string][2]want{
		"pending": {
			"claim":     {{execute, "running"}, {execute, "running"}},
			"renew":     {{lost, "pending"}, {lost, "pending"}},
			"save":      {{lost, "pending"}, {lost, "pending"}},
			"complete":  {{lost, "pending"}, {lost, "pending"}}, // the staged result names no evaluation
			"abandon":   {{lost, "pending"}, {lost, "pending"}},
			"release":   {{lost, "pending"}, {lost, "pending"}},
			"revive":    {{invalid, "pending"}, {invalid, "pending"}},
			"supersede": {{lost, "pending"}, {lost, "pending"}},
		},
		"running": {
			"claim":     {{busy, "running"}, {execute, "running"}},
			"renew":     {{ok, "running"}, {lost, "running"}},
			"save":      {{ok, "saved"}, {lost, "running"}},
			"complete":  {{invalid, "running"}, {invalid, "running"}},
			"abandon":   {{lost, "running"}, {lost, "running"}},
			"release":   {{ok, "pending"}, {ok, "pending"}},
			"revive":    {{invalid, "running"}, {invalid, "running"}},
			"supersede": {{lost, "running"}, {lost, "running"}},
		},
		"saved": {
			"claim":     {{busy, "saved"}, {publish, "saved"}},
			"renew":     {{ok, "saved"}, {lost, "saved"}},
			"save":      {{lost, "saved"}, {lost, "saved"}},
			"complete":  {{ok, "done"}, {ok, "done"}},
			"abandon":   {{ok, "abandoned"}, {lost, "saved"}},
			"release":   {{ok, "saved"}, {ok, "saved"}},
			"revive":    {{nothing, "saved"}, {nothing, "saved"}},
			"supersede": {{ok, "superseded"}, {lost, "saved"}},
		},
		"done": {
			"claim":     {{duplicate, "done"}, {duplicate, "done"}},
			"renew":     {{lost, "done"}, {lost, "done"}},
			"save":      {{lost, "done"}, {lost, "done"}},
			"complete":  {{nothing, "done"}, {nothing, "done"}},
			"abandon":   {{nothing, "done"}, {nothing, "done"}},
			"release":   {{lost, "done"}, {lost, "done"}},
			"revive":    {{invalid, "done"}, {invalid, "done"}},
			"supersede": {{lost, "done"}, {lost, "done"}},
		},
		"abandoned": {
			"claim":     {{duplicate, "abandoned"}, {duplicate, "abandoned"}},
			"renew":     {{lost, "abandoned"}, {lost, "abandoned"}},
			"save":      {{lost, "abandoned"}, {lost, "abandoned"}},
			"complete":  {{lost, "abandoned"}, {lost, "abandoned"}},
			"abandon":   {{nothing, "abandoned"}, {nothing, "abandoned"}},
			"release":   {{lost, "abandoned"}, {lost, "abandoned"}},
			"revive":    {{ok, "saved"}, {ok, "saved"}},
			"supersede": {{lost, "abandoned"}, {lost, "abandoned"}},
		},
		"superseded": {
			"claim":     {{duplicate, "superseded"}, {duplicate, "superseded"}},
			"renew":     {{lost, "superseded"}, {lost, "superseded"}},
			"save":      {{lost, "superseded"}, {lost, "superseded"}},
			"complete":  {{lost, "superseded"}, {lost, "superseded"}},
			"abandon":   {{nothing, "superseded"}, {nothing, "superseded"}},
			"release":   {{lost, "superseded"}, {lost, "superseded"}},
			"revive":    {{invalid, "superseded"}, {invalid, "superseded"}},
			"supersede": {{nothing, "superseded"}, {nothing, "superseded"}},
		},
	}
	for situation, byOp := range table {
		for _, o := range ops {
			w, found := byOp[o.name]
			if !found {
				t.Fatalf("%s: no row for %s", situation, o.name)
			}
			for i, at := range []time.Time{t0.Add(time.Second), t0.Add(time.Minute)} {
				r, l := rowIn(t, situation)
				if situation == "pending" {
					l = ledger.Lease{Key: r.Key, EvaluationID: "", Fence: 1, Phase: ledger.PhaseExecute}
				}
				got, err := o.do(&r, l, at)
				if err != nil {
					t.Fatalf("%s, %s at +%s: %v", situation, o.name, at.Sub(t0), err)
				}
				if got != w[i].answer || r.State.String() != w[i].state {
					t.Errorf("%s, %s at +%s: answered %q leaving %v, want %q leaving %s",
						situation, o.name, at.Sub(t0), got, r.State, w[i].answer, w[i].state)
				}
			}
		}
	}
}

// TestRowFormatIsStable: a Row is the stored format of both backends (inside their frames and
// envelopes): its JSON is compared with a golden file, and the golden file decodes to it.
func TestRowFormatIsStable(t *testing.T) {
	r, _ := rowIn(t, "abandoned")
	r.SeenAt = t0.Add(2 * time.Minute)
	r.NotBefore = t0.Add(3 * time.Minute)
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "row-v2.json")
	if *updateGolden {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden row: %v (write it with -update-golden)", err)
	}
	if string(append(got, '\n')) != string(want) {
		t.Fatalf("the row's JSON changed: a change to the stored format of both backends needs a format version\n got: %s\nwant: %s", got, want)
	}
	var back ledger.Row
	if err := json.Unmarshal(want, &back); err != nil || !back.Equal(&r) {
		t.Fatalf("the golden row does not decode to the row: %v", err)
	}
	// Rows written before event times and superseded rows existed decode as they were.
	old, err := os.ReadFile(filepath.Join("testdata", "row-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	r.EventAt = time.Time{}
	var first ledger.Row
	if err := json.Unmarshal(old, &first); err != nil || !first.Equal(&r) {
		t.Fatalf("a row of the first format does not decode to the row without an event time: %v", err)
	}
}
