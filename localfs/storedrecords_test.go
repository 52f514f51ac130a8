package localfs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
)

// A record read back is checked as stored: one that is not a record this ledger can have written
// under the file's name is damage (ledger.ErrCorrupt naming the file), whichever of its fields
// says so, and cleanup reports it and goes on.

// publishedSubject saves a verdict of a new delivery and asks to publish it to subject s,
// answering the subject record as stored.
func publishedSubject(t *testing.T, l *localfs.Ledger, s ledger.Subject) ledger.SubjectRecord {
	t.Helper()
	ctx := context.Background()
	d := newDelivery(time.Time{})
	ledgertest.MustAdmit(t, l, d)
	st := ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "verdict")
	q := ledger.SubjectRequest{Subject: s, Order: st.Lease.Order(), EvaluationID: st.Lease.EvaluationID,
		HoldFor: time.Minute, Settle: time.Minute}
	if g, err := l.AcquireSubject(ctx, q); err != nil || g.Outcome != ledger.SubjectPost {
		t.Fatalf("acquire: %+v %v", g, err)
	}
	rec, err := l.InspectSubject(ctx, s.Key())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// cleanupDamage runs cleanup passes until a lap is done and answers the files they reported
// damaged.
func cleanupDamage(t *testing.T, l *localfs.Ledger) []string {
	t.Helper()
	var damaged []string
	for cur := ledger.Cursor(""); ; {
		rep, err := l.Cleanup(context.Background(), cur)
		if err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		for _, d := range rep.Damaged {
			damaged = append(damaged, d.Name)
		}
		if rep.Done {
			return damaged
		}
		cur = rep.Next
	}
}

// A subject record whose subject no request could name (a name missing, or names over the
// ceiling) is damage, not a refused request: cleanup reports it and goes on.
func TestASubjectRecordOfASubjectNoRequestCouldNameIsDamage(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{Clock: ledger.NewManualClock(epoch)})
	defer l.Close()
	s := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("a", 40),
		Context: "amiss"}
	rec := publishedSubject(t, l, s)
	for name, spoil := range map[string]func(*ledger.Subject){
		"no context":           func(s *ledger.Subject) { s.Context = "" },
		"names over the limit": func(s *ledger.Subject) { s.Context = strings.Repeat("c", ledger.MaxSubjectName) },
	} {
		t.Run(name, func(t *testing.T) {
			bad := rec
			spoil(&bad.Subject)
			bad.Key = bad.Subject.Key()
			data, err := localfs.EncodeSubjectForTest(bad)
			if err != nil {
				t.Fatal(err)
			}
			p := localfs.SubjectFileForTest(dir, bad.Key)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(p)
			if _, err := l.InspectSubject(ctx, bad.Key); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), p) {
				t.Fatalf("inspect: %v, want ErrCorrupt naming %s", err, p)
			}
			if damaged := cleanupDamage(t, l); len(damaged) != 1 || damaged[0] != p {
				t.Fatalf("cleanup reports %q damaged, want %s", damaged, p)
			}
		})
	}
}

// A record's file copied under another key's name (a hand-made restore, a copy in the wrong
// folder) is damage: the record is not the key's. Cleanup reports the row and goes on.
func TestARecordFiledUnderAnotherKeyIsDamage(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{Clock: ledger.NewManualClock(epoch)})
	defer l.Close()
	s := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app", SHA: strings.Repeat("b", 40),
		Context: "amiss"}
	rec := publishedSubject(t, l, s)
	copyTo := func(from, to string) {
		t.Helper()
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	other := s
	other.SHA = strings.Repeat("c", 40)
	p := localfs.SubjectFileForTest(dir, other.Key())
	copyTo(localfs.SubjectFileForTest(dir, rec.Key), p)
	if _, err := l.InspectSubject(ctx, other.Key()); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("inspect a subject record filed under another key: %v, want ErrCorrupt naming %s", err, p)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}

	rowFile := func(k ledger.Key) string {
		return filepath.Join(dir, localfs.RowsDir, k.String()[:2], k.String()+".state")
	}
	row := rec.Newest.Key
	stranger := newDelivery(time.Time{}).Key() // never admitted
	p = rowFile(stranger)
	copyTo(rowFile(row), p)
	if _, err := l.Inspect(ctx, stranger); !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("inspect a row filed under another key: %v, want ErrCorrupt naming %s", err, p)
	}
	if damaged := cleanupDamage(t, l); len(damaged) != 1 || damaged[0] != p {
		t.Fatalf("cleanup reports %q damaged, want %s", damaged, p)
	}
}
