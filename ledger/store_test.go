package ledger_test

import (
	"errors"
	"testing"

	"github.com/amiss-ci/amiss/ledger"
)

// Every stored form of a row the ledger writes passes StoredRow.Check at its own key, with the
// ceilings inclusive, and each thing a backend can find wrong with a row read back is
// ErrCorrupt.
func TestAStoredRowIsCheckedAsTheLedgerStoresIt(t *testing.T) {
	rep := []byte("rep") // the report rowIn's rows saved
	for situation, report := range map[string][]byte{"pending": nil, "running": nil, "saved": rep, "done": nil,
		"abandoned": rep, "superseded": nil} {
		row, _ := rowIn(t, situation)
		limits := ledger.DefaultLimits()
		limits.MaxChangeBytes, limits.MaxReportBytes = len(row.Change), len(report)+1
		sr := ledger.StoredRow{Row: row, Report: report}
		if err := sr.Check(row.Key, limits); err != nil {
			t.Errorf("a %s row as the ledger stores it: %v", situation, err)
		}
	}
	// An abandoned row of a version that did not keep reports holds none.
	abandoned, _ := rowIn(t, "abandoned")
	if err := (&ledger.StoredRow{Row: abandoned}).Check(abandoned.Key, ledger.DefaultLimits()); err != nil {
		t.Errorf("an abandoned row keeping no report: %v", err)
	}

	type spoiled struct {
		situation string
		spoil     func(sr *ledger.StoredRow, key *ledger.Key, limits *ledger.Limits)
	}
	for name, c := range map[string]spoiled{
		"inconsistent in itself": {"saved", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Row.EvaluationID = "" }},
		"read at another key":    {"saved", func(_ *ledger.StoredRow, key *ledger.Key, _ *ledger.Limits) { key[0] ^= 1 }},
		"change over the ceiling": {"pending", func(sr *ledger.StoredRow, _ *ledger.Key, l *ledger.Limits) {
			l.MaxChangeBytes = len(sr.Row.Change) - 1
		}},
		"report over the ceiling": {"saved", func(sr *ledger.StoredRow, _ *ledger.Key, l *ledger.Limits) {
			l.MaxReportBytes = len(sr.Report) - 1
		}},
		"saved, another report": {"saved", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Report = []byte("rep!") }},
		"saved, no report":      {"saved", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Report = nil }},
		"abandoned, another report": {"abandoned", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) {
			sr.Report = []byte("per")
		}},
		"pending with a report":    {"pending", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Report = rep }},
		"running with a report":    {"running", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Report = rep }},
		"done with a report":       {"done", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Report = rep }},
		"superseded with a report": {"superseded", func(sr *ledger.StoredRow, _ *ledger.Key, _ *ledger.Limits) { sr.Report = rep }},
	} {
		row, _ := rowIn(t, c.situation)
		sr := ledger.StoredRow{Row: row}
		if c.situation == "saved" || c.situation == "abandoned" {
			sr.Report = rep
		}
		key, limits := row.Key, ledger.DefaultLimits()
		c.spoil(&sr, &key, &limits)
		if err := sr.Check(key, limits); !errors.Is(err, ledger.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
