package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// forbidding is the built-in rules evaluator refusing every path under secrets/.
func forbidding(t *testing.T) evaluate.Evaluator {
	t.Helper()
	r, err := evaluate.NewRules(config.Rules{ForbiddenPaths: []string{"secrets/**"}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pushChanging is a push change from a GitHub App's installation changing n files under
// secrets/, each path padded to pad bytes.
func pushChanging(n, pad int) []byte {
	s := change.Change{Provider: "github", Repository: "acme/app", SHA: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", Event: "push",
		Installation: 42}
	for i := range n {
		s.Paths = append(s.Paths, fmt.Sprintf("secrets/%04d-%s.pem", i, strings.Repeat("k", pad)))
	}
	b, _ := json.Marshal(s)
	return b
}

// The frozen verdict carries every file the rules refused, and the publication carries them
// with the webhook's installation and the delivery's key (a check run's external_id).
func TestThePublishedVerdictCarriesTheRefusedFilesTheInstallationAndTheDeliveryKey(t *testing.T) {
	w := newWorldWithChange(t, pushChanging(120, 0))
	r := w.runner("a", forbidding(t))
	if res, err := r.Process(context.Background(), w.msg); err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	got := w.pub.all()
	if len(got) != 1 {
		t.Fatalf("%d statuses published, want 1", len(got))
	}
	s := got[0]
	if s.State != "failure" || len(s.Files) != 120 || s.FilesLeftOut != 0 || s.Files[119].Path != "secrets/0119-.pem" ||
		s.Files[0].Rule != evaluate.ForbiddenPathRule {
		t.Fatalf("published %s with %d files (%d left out): %+v", s.State, len(s.Files), s.FilesLeftOut, s.Files[:1])
	}
	if s.Installation != 42 || s.ExternalID != w.msg.Key.String() {
		t.Fatalf("installation %d, external id %q; want 42 and the delivery key %s", s.Installation, s.ExternalID, w.msg.Key)
	}
}

// A ledger whose report ceiling is under the files' budget refuses the verdict with all its
// files: fewer files are frozen (and counted as left out), and the verdict itself is kept,
// not replaced by the "over the report ceiling" error verdict.
func TestFilesOverTheReportCeilingAreCutBeforeTheVerdict(t *testing.T) {
	limits := ledger.DefaultLimits()
	limits.MaxReportBytes = 8 << 10
	clock := ledger.NewManualClock(epoch)
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: limits, Clock: clock, Create: true, FS: unsyncedFS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "github-sha256", Identity: "i", BodyDigest: ledger.SumBody([]byte("b"))},
		Change: pushChanging(200, 40)}
	if a, err := l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
		t.Fatalf("admit: %+v %v", a, err)
	}
	w := &world{l: l, clock: clock, pub: &recorder{}, msg: queue.Message{Key: d.Key(), Binding: d.Binding.Digest()}}
	if res, err := w.runner("a", forbidding(t)).Process(context.Background(), w.msg); err != nil || !res.Done {
		t.Fatalf("process: %+v %v", res, err)
	}
	got := w.pub.all()
	if len(got) != 1 {
		t.Fatalf("%d statuses published, want 1", len(got))
	}
	s := got[0]
	if s.State != "failure" || !strings.HasPrefix(s.Description, "failed: forbidden path secrets/0000-") {
		t.Fatalf("published %s %q: the verdict was not kept", s.State, s.Description)
	}
	if len(s.Files) == 0 || len(s.Files)+s.FilesLeftOut != 200 {
		t.Fatalf("%d files kept, %d left out; want some kept and all 200 counted", len(s.Files), s.FilesLeftOut)
	}
}

// A report frozen before files were kept decodes with none, and a report without files
// encodes byte for byte as before (a revived or republished verdict posts the same bytes).
func TestReportsWithoutFilesKeepTheirEncoding(t *testing.T) {
	old := `{"state":"failure","description":"failed: forbidden path a (a)","context":"amiss","target_url":"https://ci.example.com"}`
	var r runner.Report
	if err := json.Unmarshal([]byte(old), &r); err != nil || r.Files != nil || r.FilesLeftOut != 0 || r.State != "failure" {
		t.Fatalf("old report: %+v %v", r, err)
	}
	if b, _ := json.Marshal(r); string(b) != old {
		t.Fatalf("re-encoded:\n got  %s\n want %s", b, old)
	}
}
