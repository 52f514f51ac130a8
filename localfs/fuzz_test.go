package localfs

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Every decoder must answer any input with a value or an error wrapping ErrCorrupt (or
// ErrRootMismatch for a newer version), never a panic; and what it accepts must re-encode to
// something it accepts again.

func fuzzLimits() ledger.Limits {
	return ledger.Limits{RecordCap: 10, SignedAgeCeiling: time.Minute, QueueCeiling: time.Hour,
		MaxChangeBytes: 256, MaxReportBytes: 512}
}

func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ledger.ErrCorrupt) && !errors.Is(err, ledger.ErrRootMismatch) {
		t.Fatalf("decoder error wraps neither ErrCorrupt nor ErrRootMismatch: %v", err)
	}
}

func seedFrames(f *testing.F, k kind, payloads ...[]byte) {
	for _, p := range payloads {
		frame := encodeFrame(k, p)
		f.Add(frame)
		f.Add(frame[:len(frame)-1])
		flipped := append([]byte(nil), frame...)
		flipped[len(flipped)/2] ^= 0x10
		f.Add(flipped)
	}
	f.Add([]byte{})
	f.Add([]byte("AMISS"))
}

func FuzzDecodeRow(f *testing.F) {
	l := fuzzLimits()
	d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "s", Identity: "i"}, Change: []byte(`{"a":1}`),
		SignedAt: time.Unix(1700000000, 0)}
	row, _, _ := ledger.NewRow(d, l, time.Unix(1700000000, 0), "0123456789abcdef0123456789abcdef")
	p, _ := json.Marshal(&row)
	seedFrames(f, kindRow, p, []byte(`{}`), []byte(`{"state":"nope"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, encodeFrame(kindRow, data)} {
			r, err := decodeRow(in, row.Key, l)
			checkDecodeErr(t, err)
			if err != nil {
				continue
			}
			again, err := encodeRow(&r, l)
			if err != nil {
				t.Fatalf("accepted row does not re-encode: %v", err)
			}
			if _, err := decodeRow(again, row.Key, l); err != nil {
				t.Fatalf("re-encoded row does not decode: %v", err)
			}
		}
	})
}

func FuzzDecodeRoot(f *testing.F) {
	p, _ := json.Marshal(rootState{Limits: fuzzLimits(), CreatedAt: 1, HighWater: 2})
	seedFrames(f, kindRoot, p, []byte(`{"limits":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, encodeFrame(kindRoot, data)} {
			_, _, err := decodeRoot(in)
			checkDecodeErr(t, err)
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	p, _ := json.Marshal(batchState{ID: 1, Entries: []batchEntry{{Key: ledger.NewKey("r", "s", "i"), EvaluationID: "e", Index: "a/b"}}})
	seedFrames(f, kindBatch, p, []byte(`{"id":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, encodeFrame(kindBatch, data)} {
			_, err := decodeBatch(in)
			checkDecodeErr(t, err)
		}
	})
}
