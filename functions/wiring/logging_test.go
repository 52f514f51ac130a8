package wiring_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/amiss-ci/amiss/functions/wiring"
)

// lines decodes JSON log lines.
func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		out = append(out, m)
	}
	b.Reset()
	return out
}

func invocation(id string) context.Context {
	return lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: id})
}

// Every line of a function's log says which invocation it belongs to and whether the
// environment is in its cold start (its start-up and its first invocation), whether or not
// the line was logged with the invocation's context; the marks follow the line's own
// attributes.
func TestEveryLogLineCarriesItsRequestIDAndColdStart(t *testing.T) {
	out := &bytes.Buffer{}
	log, inv := wiring.NewLog(out, "runner")
	log.Info("starting")
	start := lines(t, out)[0]
	if start["cold_start"] != true || start["request_id"] != nil || start["function"] != "runner" {
		t.Fatalf("start-up line %v", start)
	}

	handler := wiring.Invoked(inv, func(ctx context.Context, in string) (string, error) {
		log.Info("without the context", "key", in)
		log.InfoContext(ctx, "with the context")
		log.With("route", "gh").Warn("through With")
		return in, nil
	})
	for i, c := range []struct {
		id   string
		cold bool
	}{{"req-1", true}, {"req-2", false}, {"req-3", false}} {
		if _, err := handler(invocation(c.id), "k"); err != nil {
			t.Fatal(err)
		}
		got := lines(t, out)
		if len(got) != 3 {
			t.Fatalf("invocation %d: %d lines", i, len(got))
		}
		for _, l := range got {
			if l["request_id"] != c.id || l["cold_start"] != c.cold || l["function"] != "runner" {
				t.Errorf("invocation %s: line %v, want request_id %s, cold_start %v", c.id, l, c.id, c.cold)
			}
		}
	}
	// A line logged with another invocation's context (work carried over) names that one.
	log.InfoContext(invocation("req-2"), "late")
	if l := lines(t, out)[0]; l["request_id"] != "req-2" {
		t.Fatalf("a line logged with req-2's context names %v", l["request_id"])
	}
	// The marks come after the line's own attributes: readers matching "msg","function","key"
	// keep working.
	handler(invocation("req-4"), "k1")
	if s := out.String(); !strings.Contains(s, `"msg":"without the context","function":"runner","key":"k1","request_id":"req-4","cold_start":false`) {
		t.Fatalf("attribute order:\n%s", s)
	}
}

// Metrics carry the function's role and, in Lambda, its deployed name: an alarm of one stack
// never reads another stack's metrics.
func TestMetricsNameTheDeployedFunction(t *testing.T) {
	env(t, map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "amiss-prod-CleanupFunction-AbC"})
	m := wiring.Metrics(&bytes.Buffer{}, "cleanup")
	if m.Namespace != "amiss" || len(m.Dimensions) != 2 || m.Dimensions["Function"] != "cleanup" || m.Dimensions["FunctionName"] != "amiss-prod-CleanupFunction-AbC" {
		t.Fatalf("%+v", m)
	}
	env(t, map[string]string{})
	if m := wiring.Metrics(&bytes.Buffer{}, "cleanup"); len(m.Dimensions) != 1 {
		t.Fatalf("outside Lambda: %v", m.Dimensions)
	}
}
