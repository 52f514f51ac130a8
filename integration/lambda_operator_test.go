package integration_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// The operator function's bootstrap, as an operator invokes it (aws lambda invoke): over the
// ledger the functions share, stats and list find an abandoned row, republish revives it and
// queues its message, a bad request answers the function's error saying what to give, and the
// start-up line names the build.
func TestTheOperatorBootstrapReadsAndRepublishes(t *testing.T) {
	rieBinary(t)
	t.Parallel()
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	l, err := localfs.Open(ctx, root, localfs.Config{Limits: ledger.DefaultLimits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	d := ledger.Delivery{Binding: ledger.Binding{Route: "gh", Scheme: "github-sha256", Identity: "refused"}, Change: []byte(`{}`)}
	l.Admit(ctx, d)
	c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "runner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Save(ctx, *c.Lease, []byte(`{"state":"success","description":"ok"}`))
	if err != nil || l.Abandon(ctx, s, "publish budget of 72h0m0s spent") != nil {
		t.Fatalf("setup: %v", err)
	}
	l.Close()

	w := newLambdaWorld(t, "AMISS_LEDGER=file:"+root)
	op := startLambda(t, "operator", w.env)
	answer := func(req string) map[string]any {
		t.Helper()
		var out map[string]any
		raw := op.invoke(t, json.RawMessage(req))
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s answered %s: %v", req, raw, err)
		}
		return out
	}
	stats := answer(`{"command":"stats"}`)
	if st, _ := stats["stats"].(map[string]any); st == nil || st["rows"] != 1.0 || st["by_state"].(map[string]any)["abandoned"] != 1.0 ||
		stats["build"] == "" {
		t.Fatalf("stats answered %v\n%s", stats, op.log)
	}
	list := answer(`{"command":"list","state":"abandoned"}`)
	rows, _ := list["rows"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["key"] != d.Key().String() {
		t.Fatalf("list answered %v", list)
	}
	rep := answer(`{"command":"republish","key":"` + d.Key().String() + `"}`)
	if r, _ := rep["republished"].([]any); len(r) != 1 || r[0].(map[string]any)["queued"] != true || r[0].(map[string]any)["state"] != "saved" {
		t.Fatalf("republish answered %v\n%s", rep, op.log)
	}
	sent := w.sqs.messages()
	if len(sent) != 1 {
		t.Fatalf("%d messages queued", len(sent))
	}
	if m, err := queue.Parse(sent[0]); err != nil || m.Key != d.Key() || m.Binding != d.Binding.Digest() {
		t.Fatalf("queued %q (%v): want the revived row's message", sent[0], err)
	}
	bad := answer(`{"command":"migrate"}`)
	if msg, _ := bad["errorMessage"].(string); !strings.Contains(msg, `unknown command "migrate"`) {
		t.Fatalf("a bad request answered %v", bad)
	}
	op.kill() // its log is read whole once the process is gone
	for _, want := range []string{`"msg":"starting","function":"operator","version":`, `"msg":"operator request","function":"operator","command":"republish"`} {
		if !strings.Contains(op.log.String(), want) {
			t.Fatalf("the operator's log lacks %s:\n%s", want, op.log)
		}
	}
	st, err := localfs.Open(ctx, root, localfs.Config{Limits: ledger.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if row, _ := st.Inspect(ctx, d.Key()); row.State != ledger.StateSaved {
		t.Fatalf("the row is %v after republish", row.State)
	}
}

// The operator function never changes a ledger it was not asked to: over a root of an older
// format it does not start, naming amiss ledger migrate, and leaves the root as it was.
func TestTheOperatorBootstrapDoesNotMigrate(t *testing.T) {
	rieBinary(t)
	t.Parallel()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.CopyFS(root, os.DirFS(filepath.Join("..", "localfs", "testdata", "format-v2"))); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(root, localfs.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	w := newLambdaWorld(t, "AMISS_LEDGER=file:"+root)
	op := startLambda(t, "operator", w.env)
	out, _ := op.send(json.RawMessage(`{"command":"stats"}`))
	op.kill()
	if strings.Contains(string(out), `"stats"`) || !strings.Contains(op.log.String(), `"msg":"cannot start: ledger"`) ||
		!strings.Contains(op.log.String(), "amiss ledger migrate") {
		t.Fatalf("over a format 2 root the operator answered %s\n%s", out, op.log)
	}
	after, _ := os.ReadFile(filepath.Join(root, localfs.RootFile))
	if string(after) != string(before) {
		t.Fatal("the operator function changed the root state")
	}
	var locks []string
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".lock") {
			locks = append(locks, p)
		}
		return err
	})
	if len(locks) != 0 {
		t.Fatalf("the operator function made lock files: %v", locks)
	}
}
