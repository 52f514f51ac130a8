package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// ledger stats shows the retained rows by lifetime, the day's admissions against the rows that
// end, the projected days to full, and a warning from 80% of the record cap.
func TestLedgerStatsByLifetimeAndDaysToFull(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	limits := ledger.DefaultLimits()
	limits.RecordCap = 10
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: limits, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	admit := func(i int, d ledger.Delivery) {
		d.Binding = ledger.Binding{Route: "r", Scheme: "s", Identity: fmt.Sprint(i)}
		if a, err := l.Admit(ctx, d); err != nil || a.Outcome != ledger.Admitted {
			t.Fatalf("admit %d: %+v %v", i, a, err)
		}
	}
	for i := range 6 {
		admit(i, ledger.Delivery{})
	}
	admit(6, ledger.Delivery{SignedAt: now})
	admit(7, ledger.Delivery{BodyAt: now.Add(-limits.BodyAgeCeiling + 30*time.Minute)}) // ends within the day
	l.Close()
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"ledger", "stats", "-root", dir}, &out, &errOut); err != nil {
		t.Fatalf("stats: %v", err)
	}
	got := out.String()
	for _, want := range []string{
		"permanent 6", "signed    1", "body      1",
		"last day: 8 admitted; next day: 1 end their retention",
		"projected full in 0.3 days at this rate (2 of 10 slots free)", // 2 free / (8 - 1) a day,
		"warning: 80% of the record cap is in use",
		"body times: ceiling 96h0m0s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stats lack %q:\n%s", want, got)
		}
	}
}
