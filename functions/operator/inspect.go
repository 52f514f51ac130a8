package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Inspected is one row as an operator reads it: the row, its change as the JSON it is stored
// as (rather than the base64 a []byte becomes), and the verdict it froze when it can be read,
// or why not.
type Inspected struct {
	ledger.Row
	// Change is the row's change (Row.Change, which it stands in for in the output). Its key
	// is "subject", the row's own name for it on disk: operators' scripts read the change of
	// `amiss ledger inspect` (and the operator function's inspect) under that key, so it stays.
	Change      json.RawMessage `json:"subject,omitempty"`
	Verdict     json.RawMessage `json:"verdict,omitempty"`
	VerdictNote string          `json:"verdict_note,omitempty"`
}

// Inspect reads the row key with the verdict it froze (ledger.ErrUnknownDelivery: no such row).
func Inspect(ctx context.Context, l ledger.Ledger, key ledger.Key) (Inspected, error) {
	row, err := l.Inspect(ctx, key)
	if err != nil {
		return Inspected{}, err
	}
	return WithVerdict(ctx, l, row), nil
}

// WithVerdict fills in the verdict a row froze, or says where to find it.
func WithVerdict(ctx context.Context, l ledger.Ledger, row ledger.Row) Inspected {
	out := Inspected{Row: row, Change: changeJSON(row.Change)}
	if row.Report.IsZero() {
		return out
	}
	b, err := l.Report(ctx, row.Key)
	switch {
	case err == nil && json.Valid(b):
		out.Verdict = b
	case err == nil:
		out.VerdictNote = fmt.Sprintf("the frozen report is not JSON: %q", b)
	case row.State == ledger.StateDone:
		out.VerdictNote = "published; the ledger drops a report once its row is done"
	case row.State == ledger.StateSuperseded:
		out.VerdictNote = "never posted: a newer verdict on the same commit and status context (superseded_by) was recorded first; the ledger drops the report of a superseded row"
	default:
		out.VerdictNote = err.Error()
	}
	return out
}

// changeJSON is a stored change as JSON: itself when it is JSON (as every backend stores it),
// else its bytes as a JSON string, so that a damaged one still shows.
func changeJSON(b []byte) json.RawMessage {
	if len(b) == 0 || json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// ParseSince reads a "since" bound: an RFC 3339 time, or a duration back from now (24h).
// Empty is the zero time: no bound.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time (2026-07-01T12:00:00Z) or a duration back from now (24h)", s)
}
