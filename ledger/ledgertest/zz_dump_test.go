package ledgertest

import (
	"encoding/json"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func TestZZDump(t *testing.T) {
	data, err := os.ReadFile(os.Getenv("DUMP"))
	if err != nil {
		t.Skip()
	}
	var ops []Op
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatal(err)
	}
	ok := func(ops []Op) bool {
		var hist []porcupine.Operation
		for _, o := range ops {
			hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: o.Return})
		}
		return porcupine.CheckOperations(Model(HistoryLimits(), 0, time.Second), hist)
	}
	t.Logf("whole: %v", ok(ops))
	sort.Slice(ops, func(i, j int) bool { return ops[i].Return < ops[j].Return })
	for n := 1; n <= len(ops); n++ {
		if !ok(ops[:n]) {
			t.Logf("first failing prefix ends with call %d (%s %s)", ops[n-1].Call, ops[n-1].Kind, ops[n-1].Outcome)
			for i := 0; i < n-1; i++ {
				sub := append(append([]Op{}, ops[:i]...), ops[i+1:n]...)
				if ok(sub) {
					t.Logf("  dropping call %d (%s %s) makes the prefix linearizable", ops[i].Call, ops[i].Kind, ops[i].Outcome)
				}
			}
			break
		}
	}
}
