package integration_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.yaml.in/yaml/v3"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/localfs"
)

// The alarms on what users feel, each with a threshold whose reason the code holds: verdicts
// that cannot reach their commits (refused, abandoned), webhooks that cannot get in (refused
// as unauthenticated while none is admitted), work waiting in the ledger (the oldest
// unfinished row), and the EFS ledger's throughput.

// alarmNamed returns the template's alarm called name.
func alarmNamed(t *testing.T, raw *yaml.Node, name string) alarm {
	t.Helper()
	for _, a := range alarms(raw) {
		if a.name == name {
			return a
		}
	}
	t.Fatalf("no alarm %s", name)
	return alarm{}
}

func (a alarm) seconds(k string) time.Duration {
	var n int
	fmt.Sscan(a.get(k), &n)
	return time.Duration(n) * time.Second
}

// publishSchedule reads the runner's publish back-off from its code: the first wait and the
// cap of the doubling.
func publishSchedule(t *testing.T) (first, most time.Duration) {
	t.Helper()
	m := regexp.MustCompile(`publishRetry: (\d+) \* time\.Second, publishRetryMax: (\d+) \* time\.Minute`).
		FindStringSubmatch(readFile(t, "functions/runner/attempts.go"))
	if m == nil {
		t.Fatal("the runner's publish schedule moved: update this test")
	}
	var a, b int
	fmt.Sscan(m[1], &a)
	fmt.Sscan(m[2], &b)
	return time.Duration(a) * time.Second, time.Duration(b) * time.Minute
}

// strandedAfter reads both backends' default stranded threshold, which the cleanup uses.
func strandedAfter(t *testing.T) time.Duration {
	t.Helper()
	var got []string
	for file, re := range map[string]string{"localfs/root.go": `orDefault\(&c\.StrandedAfter, (\d+)\*time\.Minute\)`,
		"objstore/ledger.go": `c\.StrandedAfter = (\d+) \* time\.Minute`} {
		m := regexp.MustCompile(re).FindStringSubmatch(readFile(t, file))
		if m == nil {
			t.Fatalf("%s: the default stranded threshold moved: update this test", file)
		}
		got = append(got, m[1])
	}
	if got[0] != got[1] {
		t.Fatalf("the backends' stranded thresholds differ: %v", got)
	}
	var n int
	fmt.Sscan(got[0], &n)
	return time.Duration(n) * time.Minute
}

func parameterDefault(t *testing.T, raw *yaml.Node, name string) time.Duration {
	t.Helper()
	var n int
	fmt.Sscan(child(child(child(raw, "Parameters"), name), "Default").Value, &n)
	return time.Duration(n) * time.Second
}

// A refused publication fires within 15 minutes of the first refusal and keeps firing while
// the verdict is retried: it clears only after a quiet stretch longer than the publish
// schedule's longest wait. Every abandonment fires, within 5 minutes.
func TestRefusedAndAbandonedVerdictsFireAndClearOnThePublishSchedule(t *testing.T) {
	raw := rawTemplate(t)
	_, most := publishSchedule(t)
	a := alarmNamed(t, raw, "PublicationRefusedAlarm")
	period := a.seconds("Period")
	var evals, toAlarm int
	fmt.Sscan(a.get("EvaluationPeriods"), &evals)
	fmt.Sscan(a.get("DatapointsToAlarm"), &toAlarm)
	if period > 15*time.Minute || toAlarm != 1 {
		t.Errorf("PublicationRefusedAlarm: %v periods, %d of them to fire: want one refusal within 15 minutes to fire it", period, toAlarm)
	}
	if quiet := time.Duration(evals) * period; quiet <= most {
		t.Errorf("PublicationRefusedAlarm clears after %v without a refusal; the publish schedule waits up to %v between attempts", quiet, most)
	}
	if ab := alarmNamed(t, raw, "AbandonedAlarm"); ab.seconds("Period") > 5*time.Minute || ab.get("EvaluationPeriods") != "1" {
		t.Errorf("AbandonedAlarm: %v x %s periods, want each abandonment to fire within 5 minutes", ab.seconds("Period"), ab.get("EvaluationPeriods"))
	}
	// The runner's lines carry both counters, 0 when nothing was refused or abandoned.
	for _, name := range []string{"publish_refused", "abandoned"} {
		if !slices.Contains(wiring.AlarmCounters["runner"], name) {
			t.Errorf("%s is not among the runner's alarm counters %v", name, wiring.AlarmCounters["runner"])
		}
	}
}

// The oldest unfinished row is alarmed past a threshold no healthy delivery reaches: never
// below the stranded sweep's re-drive (its threshold and one cleanup period), by default past
// the publish schedule's first six retries.
func TestTheOldestUnfinishedRowIsAlarmedPastTheSchedulesOfAHealthyDelivery(t *testing.T) {
	raw := rawTemplate(t)
	first, most := publishSchedule(t)
	floor := strandedAfter(t) + time.Duration(scheduleMinutes(t, raw))*time.Minute
	p := child(child(raw, "Parameters"), "UnfinishedAlarmSeconds")
	var minValue int
	fmt.Sscan(child(p, "MinValue").Value, &minValue)
	if time.Duration(minValue)*time.Second < floor {
		t.Errorf("UnfinishedAlarmSeconds may be %d s, below the stranded sweep's re-drive (%v)", minValue, floor)
	}
	var retries time.Duration
	for i, d := 0, first; i < 6; i, d = i+1, min(2*d, most) {
		retries += d
	}
	if def := parameterDefault(t, raw, "UnfinishedAlarmSeconds"); def <= retries || def < floor {
		t.Errorf("UnfinishedAlarmSeconds defaults to %v: want past the first six publish retries (%v) and the re-drive (%v)", def, retries, floor)
	}
	if a := alarmNamed(t, raw, "OldestUnfinishedAlarm"); a.seconds("Period") < 3*time.Duration(scheduleMinutes(t, raw))*time.Minute {
		t.Errorf("OldestUnfinishedAlarm looks at %v: want the cleanup's runs of three schedule periods", a.seconds("Period"))
	}
}

// metricStats returns an alarm's metric queries (Metrics) by id: "namespace metric dims stat".
func metricStats(a alarm) (queries map[string]string, expression string) {
	queries = map[string]string{}
	for _, q := range child(a.props, "Metrics").Content {
		id := child(q, "Id").Value
		if e := child(q, "Expression"); e != nil {
			if v := child(q, "ReturnData"); v != nil && v.Value == "true" {
				expression = e.Value
			}
			continue
		}
		ms := child(q, "MetricStat")
		m := child(ms, "Metric")
		queries[id] = fmt.Sprintf("%s %s %s %s/%s", child(m, "Namespace").Value, child(m, "MetricName").Value,
			alarm{props: m}.dims(), child(ms, "Stat").Value, child(ms, "Period").Value)
	}
	return queries, expression
}

// Webhooks refused as unauthenticated while none is admitted (a secret that no longer
// matches) fire an alarm: the ingress counts a forged webhook and a valid one under the two
// metrics the alarm reads, both counters are on every ingress line, so a period with webhooks
// has both, and one without any raises nothing.
func TestRefusedWebhooksWithNoneAdmittedFire(t *testing.T) {
	raw := rawTemplate(t)
	a := alarmNamed(t, raw, "UnauthenticatedAlarm")
	q, expr := metricStats(a)
	dims := "Function=ingress,FunctionName=!Ref IngressFunction"
	if q["refused"] != "amiss unauthenticated "+dims+" Sum/900" || q["admitted"] != "amiss admitted "+dims+" Sum/900" {
		t.Errorf("UnauthenticatedAlarm reads %v", q)
	}
	if expr != "IF(admitted == 0, refused, 0)" || a.get("ComparisonOperator") != "GreaterThanThreshold" || a.get("Threshold") != "0" ||
		a.get("TreatMissingData") != "notBreaching" {
		t.Errorf("UnauthenticatedAlarm: %q %s %s, missing %s", expr, a.get("ComparisonOperator"), a.get("Threshold"), a.get("TreatMissingData"))
	}
	for _, name := range []string{"unauthenticated", "admitted"} {
		if !slices.Contains(wiring.AlarmCounters["ingress"], name) {
			t.Errorf("%s is not among the ingress's alarm counters %v", name, wiring.AlarmCounters["ingress"])
		}
	}
	// The ingress counts a forged webhook under the metric the refused query reads, and a
	// valid one under the metric the admitted query reads.
	refused, admitted := metricName(q["refused"]), metricName(q["admitted"])
	h, counted := countingIngress(t)
	forged := signedPush(t, "acme/app", "not the route's secret")
	if resp, err := h.Handle(context.Background(), forged); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged webhook answered %d %s (%v), want 401", resp.StatusCode, resp.Body, err)
	}
	if want := (counts{refused: 1}); !maps.Equal(counted, want) {
		t.Errorf("a forged webhook counted %v, want %v: the alarm's refused query reads %s", counted, want, refused)
	}
	valid := signedPush(t, "acme/app", alarmHookSecret)
	if resp, err := h.Handle(context.Background(), valid); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a valid webhook answered %d %s (%v), want 202", resp.StatusCode, resp.Body, err)
	}
	if want := (counts{refused: 1, admitted: 1}); !maps.Equal(counted, want) {
		t.Errorf("a forged then a valid webhook counted %v, want %v: the alarm's admitted query reads %s", counted, want, admitted)
	}
}

// metricName is the metric of a query as metricStats gives it ("namespace metric dims stat").
func metricName(query string) string {
	if f := strings.Fields(query); len(f) > 1 {
		return f[1]
	}
	return ""
}

// counts records what a handler counts, by name.
type counts map[string]int

func (c counts) Count(name string, n int) { c[name] += n }

// alarmHookSecret is the webhook secret of countingIngress's route.
const alarmHookSecret = "alarm-test-webhook-secret"

// mapSecrets is a secrets.Source of fixed values, by reference.
type mapSecrets map[string]string

func (m mapSecrets) Get(_ context.Context, ref string) (string, error) {
	if v, ok := m[ref]; ok {
		return v, nil
	}
	return "", fmt.Errorf("no secret %s", ref)
}

// countingIngress is an ingress of one GitHub route (gh, for acme/app, signed with
// alarmHookSecret) over a new file ledger and a local queue, and what it counts.
func countingIngress(t *testing.T) (*ingress.Handler, counts) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
routes:
  gh:
    provider: github
    secrets: [{id: k1, from: "env:AMISS_ALARM_HOOK"}]
    repositories: ["acme/app"]
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: cfg.Limits(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	q := queue.NewLocal()
	t.Cleanup(q.Close)
	c := counts{}
	return &ingress.Handler{Config: cfg, Ledger: l, Queue: q, Secrets: mapSecrets{"env:AMISS_ALARM_HOOK": alarmHookSecret},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: c}, c
}

// signedPush is a GitHub push to repo's main on route gh, signed with secret.
func signedPush(t *testing.T, repo, secret string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	sha := strings.Repeat("ef", 20)
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":%q},"commits":[{"id":%q,"message":"Fix"}]}`, sha, repo, sha)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	req := events.APIGatewayV2HTTPRequest{RawPath: "/hooks/gh", PathParameters: map[string]string{"route": "gh"}, Body: body,
		Headers: map[string]string{"x-github-event": "push", "x-hub-signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil))}}
	req.RequestContext.HTTP.Method = http.MethodPost
	return req
}

// The EFS ledger's throughput mode is a parameter (elastic by default), and an alarm watches
// the share of its permitted throughput in use, which in bursting mode falls with the credits.
func TestTheEFSLedgersThroughputIsWatched(t *testing.T) {
	raw := rawTemplate(t)
	fs := child(child(child(raw, "Resources"), "LedgerFileSystem"), "Properties")
	if v := child(fs, "ThroughputMode"); v == nil || v.Tag != "!Ref" || v.Value != "EfsThroughputMode" {
		t.Error("the ledger's file system's throughput mode is not EfsThroughputMode")
	}
	if d := child(child(child(raw, "Parameters"), "EfsThroughputMode"), "Default"); d == nil || d.Value != "elastic" {
		t.Error("EfsThroughputMode does not default to elastic")
	}
	a := alarmNamed(t, raw, "LedgerThroughputAlarm")
	if c := child(child(child(raw, "Resources"), "LedgerThroughputAlarm"), "Condition"); c == nil || c.Value != "UseEFS" {
		t.Error("LedgerThroughputAlarm is not the EFS variant's")
	}
	q, expr := metricStats(a)
	if q["metered"] != "AWS/EFS MeteredIOBytes FileSystemId=!Ref LedgerFileSystem Sum/60" ||
		q["permitted"] != "AWS/EFS PermittedThroughput FileSystemId=!Ref LedgerFileSystem Average/60" ||
		expr != "100 * (metered / PERIOD(metered)) / permitted" || a.get("Threshold") != "80" {
		t.Errorf("LedgerThroughputAlarm reads %v as %q, threshold %s", q, expr, a.get("Threshold"))
	}
}

// A new stack pages nobody: no alarm treats missing data as breaching (before their first run
// the functions emit nothing), and the alarms on what the cleanup measures keep their state
// through a period without a run.
func TestANewStackPagesNobody(t *testing.T) {
	raw := rawTemplate(t)
	for _, a := range alarms(raw) {
		missing := a.get("TreatMissingData")
		if missing == "breaching" || missing == "" || missing == "missing" {
			t.Errorf("%s treats missing data as %q", a.name, missing)
		}
		if a.get("Namespace") == "amiss" && strings.Contains(a.dims(), "FunctionName=!Ref CleanupFunction") && missing != "ignore" {
			t.Errorf("%s reads what a cleanup run measures, and treats a period without a run as %s", a.name, missing)
		}
	}
}

// The runbook has, for every alarm, what it sees, what it cannot see, and what to do.
func TestTheRunbookSaysWhatEachAlarmSeesAndCannotSee(t *testing.T) {
	raw := rawTemplate(t)
	doc := readFile(t, "docs/deployment.md")
	for _, a := range alarms(raw) {
		i := strings.Index(doc, "\n### `"+a.name+"`")
		if i < 0 {
			t.Errorf("docs/deployment.md has no runbook section ### `%s`", a.name)
			continue
		}
		section := doc[i+1:]
		if j := strings.Index(section[1:], "\n#"); j >= 0 {
			section = section[:j+1]
		}
		for _, label := range []string{"**Sees:**", "**Cannot see:**", "**Do:**"} {
			if !strings.Contains(section, label) {
				t.Errorf("the runbook's %s section says no %s", a.name, label)
			}
		}
	}
}
