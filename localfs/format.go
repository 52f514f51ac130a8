package localfs

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"

	"github.com/amiss-ci/amiss/ledger"
)

// FormatVersion is the on-disk format this code writes. Every file carries its version; a
// file of a newer version fails closed, an older released one is migrated when read.
const FormatVersion = 1

// A frame is: "AMISS" | kind (1 byte) | version (uint16) | payload length (uint32) | payload |
// CRC-32C of everything before it (uint32). Payloads of state files are JSON; a report's
// payload is the report's own bytes.
const (
	frameMagic    = "AMISS"
	frameHeader   = len(frameMagic) + 1 + 2 + 4
	frameTrailer  = 4
	frameOverhead = frameHeader + frameTrailer
)

type kind byte

const (
	kindRoot     kind = 'R'
	kindCapacity kind = 'C'
	kindRow      kind = 'W'
	kindReport   kind = 'P'
	kindBatch    kind = 'B'
)

func (k kind) String() string {
	switch k {
	case kindRoot:
		return "root state"
	case kindCapacity:
		return "capacity record"
	case kindRow:
		return "row state"
	case kindReport:
		return "report"
	case kindBatch:
		return "cleanup batch"
	}
	return fmt.Sprintf("kind %q", byte(k))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeFrame(k kind, payload []byte) []byte { return encodeFrameVersion(k, FormatVersion, payload) }

func encodeFrameVersion(k kind, version uint16, payload []byte) []byte {
	out := make([]byte, 0, frameOverhead+len(payload))
	out = append(out, frameMagic...)
	out = append(out, byte(k))
	out = binary.BigEndian.AppendUint16(out, version)
	out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// decodeFrame checks a frame of the given kind and returns its version and payload. Every
// failure wraps ledger.ErrCorrupt (or ledger.ErrRootMismatch for a newer version).
func decodeFrame(k kind, data []byte, maxPayload int) (uint16, []byte, error) {
	if len(data) < frameOverhead {
		return 0, nil, fmt.Errorf("%w: %v truncated: %d bytes", ledger.ErrCorrupt, k, len(data))
	}
	if string(data[:len(frameMagic)]) != frameMagic {
		return 0, nil, fmt.Errorf("%w: %v has no amiss header", ledger.ErrCorrupt, k)
	}
	if kind(data[len(frameMagic)]) != k {
		return 0, nil, fmt.Errorf("%w: expected a %v, found a %v", ledger.ErrCorrupt, k, kind(data[len(frameMagic)]))
	}
	version := binary.BigEndian.Uint16(data[len(frameMagic)+1:])
	n := binary.BigEndian.Uint32(data[len(frameMagic)+3:])
	if int64(n) > int64(maxPayload) {
		return 0, nil, fmt.Errorf("%w: %v payload of %d bytes, ceiling %d", ledger.ErrCorrupt, k, n, maxPayload)
	}
	if len(data) != frameOverhead+int(n) {
		return 0, nil, fmt.Errorf("%w: %v is %d bytes, header says %d", ledger.ErrCorrupt, k, len(data), frameOverhead+int(n))
	}
	body := data[:frameHeader+int(n)]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[len(body):]) {
		return 0, nil, fmt.Errorf("%w: %v checksum mismatch", ledger.ErrCorrupt, k)
	}
	if version > FormatVersion {
		return 0, nil, fmt.Errorf("%w: %v written by format %d, this build reads up to %d", ledger.ErrRootMismatch, k, version, FormatVersion)
	}
	if version == 0 {
		return 0, nil, fmt.Errorf("%w: %v has format version 0", ledger.ErrCorrupt, k)
	}
	return version, body[frameHeader:], nil
}

// decodeJSON decodes a JSON frame strictly: unknown fields are corruption, not silence.
func decodeJSON(k kind, data []byte, maxPayload int, v any) (uint16, error) {
	version, payload, err := decodeFrame(k, data, maxPayload)
	if err != nil {
		return 0, err
	}
	if err := unmarshalStrict(payload, v); err != nil {
		return 0, fmt.Errorf("%w: %v payload: %v", ledger.ErrCorrupt, k, err)
	}
	return version, nil
}

func encodeJSON(k kind, v any) ([]byte, error) {
	p, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("localfs: encode %v: %w", k, err)
	}
	return encodeFrame(k, p), nil
}

// rootState is .amiss-root.state.
type rootState struct {
	Limits    ledger.Limits `json:"limits"`
	CreatedAt int64         `json:"created_at_unix_nano"`
	HighWater int64         `json:"high_water_unix_nano"`
}

// capacityState is .amiss-capacity.state: a slot count that may overstate use but never
// understates it, at most one exact pending key, and the last cleanup batch applied.
type capacityState struct {
	Used         int64       `json:"used"`
	Pending      *ledger.Key `json:"pending,omitempty"`
	AppliedBatch uint64      `json:"applied_batch"`
}

// batchState is .amiss-cleanup.batch: the rows one cleanup batch removes, written before the
// first removal so a crashed pass is finished, and its capacity released, exactly once.
type batchState struct {
	ID      uint64       `json:"id"`
	Entries []batchEntry `json:"entries"`
	// Pending is the capacity record's pending key when the batch was chosen, if its row
	// existed then: its slot is in use, so it must not be given back when a settler later
	// finds the row gone (this batch may have removed it, and releases it once).
	Pending *ledger.Key `json:"pending,omitempty"`
}

type batchEntry struct {
	Key          ledger.Key `json:"key"`
	EvaluationID string     `json:"evaluation_id"`
	Index        string     `json:"index,omitempty"`
}

const (
	maxRootPayload     = 4 << 10
	maxCapacityPayload = 1 << 10
	maxBatchEntries    = 10_000
	maxBatchPayload    = maxBatchEntries*256 + 1024
)

// maxRowPayload is the ceiling of a row's JSON: the subject (base64) plus fixed fields.
func maxRowPayload(l ledger.Limits) int { return (l.MaxSubjectBytes+2)/3*4 + 8<<10 }

func decodeRoot(data []byte) (rootState, error) {
	var s rootState
	_, err := decodeJSON(kindRoot, data, maxRootPayload, &s)
	if err == nil {
		if verr := s.Limits.Validate(); verr != nil {
			err = fmt.Errorf("%w: root state holds invalid limits: %v", ledger.ErrCorrupt, verr)
		}
	}
	return s, err
}

func decodeCapacity(data []byte) (capacityState, error) {
	var s capacityState
	_, err := decodeJSON(kindCapacity, data, maxCapacityPayload, &s)
	if err == nil && s.Used < 0 {
		err = fmt.Errorf("%w: capacity record holds a negative count %d", ledger.ErrCorrupt, s.Used)
	}
	return s, err
}

func decodeBatch(data []byte) (batchState, error) {
	var s batchState
	_, err := decodeJSON(kindBatch, data, maxBatchPayload, &s)
	if err == nil && (s.ID == 0 || len(s.Entries) > maxBatchEntries) {
		err = fmt.Errorf("%w: cleanup batch id %d with %d entries", ledger.ErrCorrupt, s.ID, len(s.Entries))
	}
	return s, err
}

func decodeRow(data []byte, l ledger.Limits) (ledger.Row, error) {
	var r ledger.Row
	if _, err := decodeJSON(kindRow, data, maxRowPayload(l), &r); err != nil {
		return ledger.Row{}, err
	}
	if err := r.Check(); err != nil {
		return ledger.Row{}, err
	}
	if len(r.Subject) > l.MaxSubjectBytes {
		return ledger.Row{}, fmt.Errorf("%w: row subject of %d bytes over the ceiling %d", ledger.ErrCorrupt, len(r.Subject), l.MaxSubjectBytes)
	}
	return r, nil
}

func encodeRow(r *ledger.Row, l ledger.Limits) ([]byte, error) {
	p, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("localfs: encode row: %w", err)
	}
	if len(p) > maxRowPayload(l) {
		return nil, fmt.Errorf("%w: row state of %d bytes, ceiling %d", ledger.ErrTooLarge, len(p), maxRowPayload(l))
	}
	return encodeFrame(kindRow, p), nil
}

func decodeReport(data []byte, l ledger.Limits) ([]byte, error) {
	_, p, err := decodeFrame(kindReport, data, l.MaxReportBytes)
	return p, err
}
