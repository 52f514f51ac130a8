package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// refusing is a provider that refuses every status with 422 until fixed.
type refusing struct {
	mu     sync.Mutex
	fixed  bool
	posted []publish.Status
}

func (p *refusing) Publish(ctx context.Context, s publish.Status) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.fixed {
		return &publish.Error{Class: publish.Permanent, Status: 422, Err: errors.New("POST /repos/acme/app/statuses answered 422: No commit found for SHA")}
	}
	p.posted = append(p.posted, s)
	return nil
}

func (p *refusing) Standing(_ context.Context, s publish.Status) (publish.Standing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.posted) - 1; i >= 0; i-- {
		if q := p.posted[i]; q.Repository == s.Repository && q.SHA == s.SHA && q.Context == s.Context {
			if q.State == s.State && q.Description == s.Description && q.TargetURL == s.TargetURL {
				return publish.StandingOurs, nil
			}
			return publish.StandingOther, nil
		}
	}
	return publish.StandingNone, nil
}

type constant evaluate.Verdict

func (c constant) Evaluate(context.Context, change.Change) (evaluate.Verdict, error) {
	return evaluate.Verdict(c), nil
}

// abandonedRoot makes a file root with n rows the runner abandoned on a 422, and one done row.
func abandonedRoot(t *testing.T, n int) (string, *refusing, func(queue.Message) runner.Result) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	l, err := localfs.Open(context.Background(), dir, localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &refusing{}
	calls := 0
	r := &runner.Runner{Ledger: l, Owner: "t", Lease: time.Minute, Routes: func(context.Context, string) (*runner.Route, error) {
		calls++
		return &runner.Route{Evaluator: constant{State: "failure", Description: fmt.Sprintf("failed: pull request title (evaluation %d)", calls)},
			Publisher: p, Context: "amiss/verdict"}, nil
	}}
	process := func(m queue.Message) runner.Result {
		res, err := r.Process(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range n + 1 {
		s, _ := json.Marshal(change.Change{Repository: "acme/app", SHA: fmt.Sprintf("%040x", i+1), Event: "push"})
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: fmt.Sprint(i)}, Change: s}
		if _, err := l.Admit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		if i == n {
			p.fixed = true // the last one is published: a done row
		}
		if res := process(queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}); !res.Done {
			t.Fatalf("row %d not finished: %+v", i, res)
		}
	}
	p.fixed, p.posted = false, nil
	return dir, p, process
}

func TestListInspectRepublishOnAFileRoot(t *testing.T) {
	t.Setenv("AMISS_QUEUE_URL", "")
	dir, p, process := abandonedRoot(t, 3)
	ctx := context.Background()
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"ledger", "list", "-root", dir, "-state", "abandoned"}, &out, &errOut); err != nil {
		t.Fatalf("list: %v %s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("list -state abandoned:\n%s", out.String())
	}
	key := strings.Split(lines[0], "\t")[0]
	if len(key) != 64 || !strings.Contains(lines[0], "\tabandoned\t") || !strings.Contains(lines[0], "422") {
		t.Fatalf("list line %q: want the full key, the state and the reason", lines[0])
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "list", "-root", dir}, &out, &errOut); err != nil || strings.Count(out.String(), "\n") != 4 {
		t.Fatalf("list of every row: %v\n%s", err, out.String())
	}

	// inspect takes the key list printed, and shows the verdict the row froze.
	out.Reset()
	if err := run(ctx, []string{"ledger", "inspect", "-root", dir, key}, &out, &errOut); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var row struct {
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Verdict struct {
			State, Description string
		} `json:"verdict"`
	}
	if err := json.Unmarshal(out.Bytes(), &row); err != nil || row.State != "abandoned" || row.Verdict.State != "failure" ||
		!strings.HasPrefix(row.Verdict.Description, "failed: pull request title (evaluation ") ||
		!strings.Contains(row.Reason, `verdict failure: "failed: pull request title (evaluation `) {
		t.Fatalf("inspect: %v\n%s", err, out.String())
	}

	// republish one: revived with the same bytes; without a queue, the command says when it runs.
	out.Reset()
	if err := run(ctx, []string{"ledger", "republish", "-root", dir, "-queue", "", key}, &out, &errOut); err != nil {
		t.Fatalf("republish: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "republished "+key) || !strings.Contains(out.String(), "saved") ||
		!strings.Contains(out.String(), "amiss serve") {
		t.Fatalf("republish output:\n%s", out.String())
	}
	p.fixed = true
	k, _ := ledger.ParseKey(key)
	var m queue.Message
	lr, _ := localfs.Open(ctx, dir, localfs.Config{Limits: ledger.DefaultLimits()})
	defer lr.Close()
	r, _ := lr.Inspect(ctx, k)
	m = queue.Message{Key: k, Binding: r.Binding.Digest()}
	if res := process(m); !res.Done || len(p.posted) != 1 || !strings.HasPrefix(p.posted[0].Description, "failed: pull request title (evaluation ") {
		t.Fatalf("after republish: %+v, posted %+v", res, p.posted)
	}
	// The same bytes as frozen, never evaluated again: the description names the first evaluation.
	if !strings.Contains(row.Reason, fmt.Sprintf("%q", p.posted[0].Description)) {
		t.Fatalf("published %q, the row froze %q", p.posted[0].Description, row.Reason)
	}

	// republish -abandoned -since: the two left, and nothing twice.
	out.Reset()
	if err := run(ctx, []string{"ledger", "republish", "-root", dir, "-queue", "", "-abandoned", "-since", "1h"}, &out, &errOut); err != nil {
		t.Fatalf("republish -abandoned: %v\n%s", err, out.String())
	}
	if strings.Count(out.String(), "republished ") != 2 {
		t.Fatalf("republish -abandoned:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "republish", "-root", dir, "-abandoned", "-since", "2026-01-01T00:00:00Z"}, &out, &errOut); err != nil ||
		!strings.Contains(out.String(), "no abandoned row") {
		t.Fatalf("nothing left to republish: %v\n%s", err, out.String())
	}

	// Bad input: a clear error, nothing changed.
	for _, args := range [][]string{
		{"ledger", "republish", "-root", dir, key[:12]},
		{"ledger", "republish", "-root", dir},
		{"ledger", "republish", "-root", dir, "-since", "1h", key},
		{"ledger", "republish", "-root", dir, "-abandoned", "-since", "yesterday"},
		{"ledger", "list", "-root", dir, "-state", "finished"},
	} {
		if err := run(ctx, args, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if err := run(ctx, []string{"ledger", "republish", "-root", dir, key}, &out, &errOut); !errors.Is(err, ledger.ErrInvalid) ||
		!strings.Contains(err.Error(), "done") {
		t.Fatalf("republish of a done row: %v", err)
	}
}

// A verdict superseded by a newer one on the same commit and context is shown as such: list
// names the newer verdict, inspect says why it was never posted, stats counts it and the
// subject record.
func TestASupersededRowIsShownWithTheVerdictThatSupersededIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	ctx := context.Background()
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	p := &refusing{fixed: true}
	r := &runner.Runner{Ledger: l, Owner: "t", Lease: time.Minute, Routes: func(context.Context, string) (*runner.Route, error) {
		return &runner.Route{Evaluator: constant{State: "success", Description: "ok"}, Publisher: p, Context: "amiss/verdict"}, nil
	}}
	s, _ := json.Marshal(change.Change{Repository: "acme/app", SHA: fmt.Sprintf("%040x", 7), Event: "pull_request",
		Pull: &change.Pull{Number: 1, Title: "t", TargetBranch: "main"}})
	var keys []ledger.Key
	for i, at := range []time.Time{time.Now().Add(-time.Minute), time.Now().Add(-2 * time.Minute)} { // the newer first
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: fmt.Sprint(i)}, Change: s, BodyAt: at}
		if _, err := l.Admit(ctx, d); err != nil {
			t.Fatal(err)
		}
		if res, err := r.Process(ctx, queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}); err != nil || !res.Done {
			t.Fatalf("delivery %d: %+v %v", i, res, err)
		}
		keys = append(keys, d.Key())
	}
	l.Close()
	newer, older := keys[0], keys[1]
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"ledger", "list", "-root", dir, "-state", "superseded"}, &out, &errOut); err != nil {
		t.Fatalf("list: %v %s", err, errOut.String())
	}
	if line := strings.TrimSpace(out.String()); !strings.HasPrefix(line, older.String()+"\tsuperseded\t") || !strings.Contains(line, "superseded by "+newer.String()) {
		t.Fatalf("list -state superseded:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "inspect", "-root", dir, older.String()}, &out, &errOut); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	var row struct {
		State        string `json:"state"`
		SupersededBy string `json:"superseded_by"`
		VerdictNote  string `json:"verdict_note"`
	}
	if err := json.Unmarshal(out.Bytes(), &row); err != nil || row.State != "superseded" || row.SupersededBy != newer.String() ||
		!strings.Contains(row.VerdictNote, "never posted") {
		t.Fatalf("inspect: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "stats", "-root", dir}, &out, &errOut); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if !strings.Contains(out.String(), "superseded 1") || !strings.Contains(out.String(), "subject records 1") {
		t.Fatalf("stats:\n%s", out.String())
	}
	if len(p.posted) != 1 || p.posted[0].State != "success" {
		t.Fatalf("posted %+v: want the newer verdict once", p.posted)
	}
}
