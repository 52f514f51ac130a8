package wiring_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/amiss-ci/amiss/functions/wiring"
)

// An ingress invocation that refused a webhook writes admitted 0 beside unauthenticated 1,
// and a runner's line carries publish_refused and abandoned at 0 when none happened: the
// alarms reading them find a value in every period the function ran.
func TestTheAlarmCountersAreOnEveryLine(t *testing.T) {
	for fn, counted := range map[string]string{"ingress": "unauthenticated", "runner": "published"} {
		var out bytes.Buffer
		m := wiring.Metrics(&out, fn)
		m.Count(counted, 1)
		if err := m.Flush(); err != nil {
			t.Fatal(err)
		}
		var line map[string]any
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		for _, name := range wiring.AlarmCounters[fn] {
			want := 0.0
			if name == counted {
				want = 1
			}
			if v, ok := line[name].(float64); !ok || v != want {
				t.Errorf("%s: %s is %v on the line, want %v: %s", fn, name, line[name], want, out.String())
			}
		}
	}
}
