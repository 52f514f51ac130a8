package metrics_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/metrics"
)

func TestEMFLine(t *testing.T) {
	var out bytes.Buffer
	m := &metrics.EMF{Namespace: "amiss", Dimensions: map[string]string{"Function": "runner"}, Out: &out,
		Now: func() time.Time { return time.UnixMilli(1700000000000) }}
	if err := m.Flush(); err != nil || out.Len() != 0 {
		t.Fatalf("empty flush wrote %q", out.String())
	}
	m.Count("published", 1)
	m.Count("published", 2)
	m.Count("lease_lost", 1)
	m.Latency("publish_latency", 1500*time.Microsecond)
	m.Latency("publish_latency", 2500*time.Microsecond)
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if line["published"].(float64) != 3 || line["lease_lost"].(float64) != 1 || line["Function"] != "runner" {
		t.Fatalf("values %v", line)
	}
	lat := line["publish_latency"].([]any)
	if len(lat) != 2 || lat[0].(float64) != 1.5 {
		t.Fatalf("latencies %v", lat)
	}
	aws := line["_aws"].(map[string]any)
	cw := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if aws["Timestamp"].(float64) != 1700000000000 || cw["Namespace"] != "amiss" || len(cw["Metrics"].([]any)) != 3 {
		t.Fatalf("_aws %v", aws)
	}
	if dims := cw["Dimensions"].([]any)[0].([]any); len(dims) != 1 || dims[0] != "Function" {
		t.Fatalf("dimensions %v", dims)
	}
	out.Reset()
	m.Flush()
	if out.Len() != 0 {
		t.Fatal("a flush repeated the previous values")
	}
}

// A gauge is written with its unit; the last value before a flush wins, and a flush with only
// gauges still writes a line.
func TestEMFGauge(t *testing.T) {
	var out bytes.Buffer
	m := &metrics.EMF{Namespace: "amiss", Dimensions: map[string]string{"Function": "cleanup"}, Out: &out}
	m.Gauge("capacity_used_percent", 50, "Percent")
	m.Gauge("capacity_used_percent", 81.5, "Percent")
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	defs := line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any)
	if line["capacity_used_percent"].(float64) != 81.5 || len(defs) != 1 || defs[0].(map[string]any)["Unit"] != "Percent" {
		t.Fatalf("gauge line %s", out.String())
	}
}

// A counter named in Zero is on every line, 0 when nothing was counted, so an alarm comparing
// two counters finds both wherever the function ran; it makes no line by itself.
func TestZeroCountersAreOnEveryLine(t *testing.T) {
	var out bytes.Buffer
	m := &metrics.EMF{Namespace: "amiss", Dimensions: map[string]string{"Function": "ingress"}, Out: &out,
		Zero: []string{"admitted", "unauthenticated"}}
	if err := m.Flush(); err != nil || out.Len() != 0 {
		t.Fatalf("a flush with nothing counted wrote %q", out.String())
	}
	m.Count("unauthenticated", 1)
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	defs := map[string]bool{}
	for _, d := range line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any) {
		defs[d.(map[string]any)["Name"].(string)] = true
	}
	if v, ok := line["admitted"].(float64); !ok || v != 0 || line["unauthenticated"].(float64) != 1 || !defs["admitted"] || !defs["unauthenticated"] || len(defs) != 2 {
		t.Fatalf("line %s", out.String())
	}
}
