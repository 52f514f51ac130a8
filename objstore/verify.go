package objstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/amiss-ci/amiss/ledger"
)

// ReadLimits returns the limits recorded in the ledger under bucket and prefix, so operator
// tools can open it without being told how it was created.

// ReadLimits returns the limits recorded in the ledger under bucket and prefix, so operator
// tools can open it without being told how it was created.
func ReadLimits(ctx context.Context, client *s3.Client, bucket, prefix string) (ledger.Limits, error) {
	l := &Ledger{s: store{client: client, bucket: bucket, prefix: prefix}}
	root, _, err := l.readRoot(ctx)
	if errors.Is(err, errNotFound) {
		return ledger.Limits{}, fmt.Errorf("%w: %s is missing: not a ledger", ledger.ErrRootMismatch, l.s.key(rootName))
	}
	return root.Limits, err
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	Objects, Rows int
	// Reservations counts keys that hold an admission's reservation and no row; Subjects the
	// subject records.
	Reservations, Subjects int
	CapacityUsed           int64
	Problems               []string
}

// OK reports whether Verify found nothing wrong.
func (v VerifyReport) OK() bool { return len(v.Problems) == 0 }

// Verify reads every object of the ledger and checks that it decodes and that the capacity
// shards do not understate the rows. It changes nothing. progress, when not nil, is called
// after each row with the rows read and the capacity count (an estimate of the total).
func (l *Ledger) Verify(ctx context.Context, progress func(done int, total int64)) (VerifyReport, error) {
	var v VerifyReport
	problem := func(format string, args ...any) { v.Problems = append(v.Problems, fmt.Sprintf(format, args...)) }
	if _, _, err := l.readRoot(ctx); err != nil {
		problem("%v", err)
	} else {
		v.Objects++
	}
	for i := range l.shards {
		st, err := l.readShard(ctx, i)
		if err != nil {
			problem("%v", err)
			continue
		}
		v.Objects++
		v.CapacityUsed += st.data.Used
	}
	if b, _, err := l.readBatch(ctx); err != nil {
		problem("%v", err)
	} else if b != nil {
		v.Objects++
		if !b.Done {
			problem("%s: cleanup batch %d is unfinished; the next cleanup finishes it", l.s.key(batchName), b.ID)
		}
	}
	after := ""
	for {
		names, more, err := l.s.list(ctx, rowsPrefix, after, 1000)
		if err != nil {
			return v, fmt.Errorf("verify: %w", err)
		}
		for _, n := range names {
			v.Rows++
			key, ok := keyOf(n)
			if !ok {
				problem("%s: not a row object name", l.s.key(n))
				continue
			}
			ks, err := l.readKey(ctx, key)
			switch {
			case err != nil:
				problem("%v", err)
			case ks.res != nil:
				// The reservation of an admission that has not created its row (or was
				// abandoned): no row, no slot of its own.
				v.Rows--
				v.Reservations++
				v.Objects++
			case ks.row != nil:
				v.Objects++
			default:
				v.Rows-- // removed since it was listed
			}
			if progress != nil {
				progress(v.Rows, v.CapacityUsed)
			}
		}
		if !more || len(names) == 0 {
			break
		}
		after = names[len(names)-1]
	}
	if v.CapacityUsed < int64(v.Rows) {
		problem("capacity shards count %d, fewer than the %d rows stored", v.CapacityUsed, v.Rows)
	}
	for after := ""; ; {
		names, more, err := l.s.list(ctx, subjectsPrefix, after, 1000)
		if err != nil {
			return v, fmt.Errorf("verify: %w", err)
		}
		for _, n := range names {
			k, err := ledger.ParseSubjectKey(strings.TrimSuffix(strings.TrimPrefix(n, subjectsPrefix), ".json"))
			if err != nil {
				problem("%s: not a subject record's name", l.s.key(n))
				continue
			}
			v.Subjects++
			if _, _, exists, err := l.readSubject(ctx, k); err != nil {
				problem("%v", err)
			} else if exists {
				v.Objects++
			}
		}
		if !more || len(names) == 0 {
			return v, nil
		}
		after = names[len(names)-1]
	}
}
