// Package metrics writes CloudWatch Embedded Metric Format (EMF) log lines: one JSON object per
// flush, with the "_aws" metadata that makes CloudWatch Logs extract the values as metrics, so
// no metrics API call is on the request path.
package metrics

import (
	"encoding/json"
	"io"
	"sort"
	"sync"
	"time"
)

// EMF collects counters and latencies and writes them as one EMF line per Flush. It is safe
// for concurrent use.
type EMF struct {
	Namespace  string
	Dimensions map[string]string
	Out        io.Writer
	Now        func() time.Time
	// Zero names counters that every line carries, as 0 when nothing was counted: an alarm
	// that reads one counter against another (webhooks refused while none is admitted) then
	// finds both in each period the function ran, instead of a missing value it cannot tell
	// from a period without invocations. They make no line of their own.
	Zero []string

	mu        sync.Mutex
	counts    map[string]float64
	latencies map[string][]float64
	gauges    map[string]gauge
}

type gauge struct {
	value float64
	unit  string
}

// Count adds n to a counter.
func (e *EMF) Count(name string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts = map[string]float64{}
	}
	e.counts[name] += float64(n)
}

// Gauge records the current value of a quantity (the last one recorded before a flush wins),
// with its CloudWatch unit ("Count", "Percent", ...).
func (e *EMF) Gauge(name string, v float64, unit string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gauges == nil {
		e.gauges = map[string]gauge{}
	}
	e.gauges[name] = gauge{v, unit}
}

// Latency records one duration, in milliseconds.
func (e *EMF) Latency(name string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.latencies == nil {
		e.latencies = map[string][]float64{}
	}
	e.latencies[name] = append(e.latencies[name], float64(d.Microseconds())/1000)
}

// Flush writes what was collected since the last flush (nothing when empty).
func (e *EMF) Flush() error {
	e.mu.Lock()
	counts, latencies, gauges := e.counts, e.latencies, e.gauges
	e.counts, e.latencies, e.gauges = nil, nil, nil
	e.mu.Unlock()
	if len(counts) == 0 && len(latencies) == 0 && len(gauges) == 0 {
		return nil
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	type metric struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	var defs []metric
	line := map[string]any{}
	dims := make([]string, 0, len(e.Dimensions))
	for k, v := range e.Dimensions {
		line[k] = v
		dims = append(dims, k)
	}
	sort.Strings(dims)
	for _, name := range e.Zero {
		if _, ok := counts[name]; !ok {
			defs = append(defs, metric{name, "Count"})
			line[name] = 0.0
		}
	}
	for name, v := range counts {
		defs = append(defs, metric{name, "Count"})
		line[name] = v
	}
	for name, g := range gauges {
		defs = append(defs, metric{name, g.unit})
		line[name] = g.value
	}
	for name, vs := range latencies {
		defs = append(defs, metric{name, "Milliseconds"})
		if len(vs) == 1 {
			line[name] = vs[0]
		} else {
			line[name] = vs // EMF takes an array of values
		}
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	line["_aws"] = map[string]any{
		"Timestamp": now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace":  e.Namespace,
			"Dimensions": [][]string{dims},
			"Metrics":    defs,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = e.Out.Write(append(b, '\n'))
	return err
}
