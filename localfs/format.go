package localfs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/ledger"
)

// FormatVersion is the on-disk format this code writes. Every file carries its version; a
// file of a newer version fails closed, one of format 2 is read as it is.
//
// Format 2 shards the capacity record (one per row shard, guarded by its row lock), keeps a
// saved report inside its row's state file, and records in each row the capacity shard that
// holds its slot. Format 4 adds the subject records (subjects.go) and superseded rows; its files
// are format 2's otherwise. A format 2 root is migrated by writing its root state as format 4,
// so that a format 2 process (which would take a superseded row for a damaged one and knows
// nothing of subject records) refuses the root.
//
// Formats 1 (one capacity record per root, reports in files of their own) and 3 (per-process
// admission logs on local roots) were written by development builds only, never by a release,
// and are refused (retiredFormats).
const FormatVersion = 4

// retiredFormats says what each retired format was. A file of one is refused, as a newer
// format is, with ErrRootMismatch, what it was and what to do (docs/file-ledger.md).
var retiredFormats = map[uint16]string{
	1: "the one capacity record per root of a development build that no release shipped",
	3: "the admission logs of a development build that no release shipped",
}

// A frame is: "AMISS" | kind (1 byte) | version (uint16) | payload length (uint32) | payload |
// CRC-32C of everything before it (uint32). Payloads are JSON.
const (
	frameMagic    = "AMISS"
	frameHeader   = len(frameMagic) + 1 + 2 + 4
	frameTrailer  = 4
	frameOverhead = frameHeader + frameTrailer
)

type kind byte

const (
	kindRoot    kind = 'R'
	kindRow     kind = 'W'
	kindBatch   kind = 'B'
	kindShard   kind = 'S'
	kindSweep   kind = 'M'
	kindRoom    kind = 'E'
	kindSubject kind = 'J'
	kindState   kind = 'N'
)

var kindNames = map[kind]string{kindRoot: "root state", kindRow: "row state", kindBatch: "cleanup batch",
	kindShard: "capacity shard", kindSweep: "maintenance state", kindRoom: "room epoch", kindSubject: "subject record",
	kindState: "named state record"}

func (k kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind %q", byte(k))
}

func encodeFrame(k kind, payload []byte) []byte { return encodeFrameVersion(k, FormatVersion, payload) }

func encodeFrameVersion(k kind, version uint16, payload []byte) []byte {
	out := make([]byte, 0, frameOverhead+len(payload))
	out = append(out, frameMagic...)
	out = append(out, byte(k))
	out = binary.BigEndian.AppendUint16(out, version)
	out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	return binary.BigEndian.AppendUint32(out, ledger.Checksum(out))
}

// decodeFrame checks a frame of the given kind and returns its version and payload. Every
// failure wraps ledger.ErrCorrupt (or ledger.ErrRootMismatch for a newer version).
func decodeFrame(k kind, data []byte, maxPayload int) (uint16, []byte, error) {
	if len(data) < frameOverhead {
		return 0, nil, fmt.Errorf("%w: %v truncated: %d bytes", ledger.ErrCorrupt, k, len(data))
	}
	version := binary.BigEndian.Uint16(data[len(frameMagic)+1:])
	n := binary.BigEndian.Uint32(data[len(frameMagic)+3:])
	end := frameHeader + int(n) // where the checksum starts
	switch what, retired := retiredFormats[version]; {
	case string(data[:len(frameMagic)]) != frameMagic:
		return 0, nil, fmt.Errorf("%w: %v has no amiss header", ledger.ErrCorrupt, k)
	case kind(data[len(frameMagic)]) != k:
		return 0, nil, fmt.Errorf("%w: expected a %v, found a %v", ledger.ErrCorrupt, k, kind(data[len(frameMagic)]))
	case int64(n) > int64(maxPayload):
		return 0, nil, fmt.Errorf("%w: %v payload of %d bytes, ceiling %d", ledger.ErrCorrupt, k, n, maxPayload)
	case len(data) != frameOverhead+int(n):
		return 0, nil, fmt.Errorf("%w: %v is %d bytes, header says %d", ledger.ErrCorrupt, k, len(data), frameOverhead+int(n))
	case ledger.Checksum(data[:end]) != binary.BigEndian.Uint32(data[end:]):
		return 0, nil, fmt.Errorf("%w: %v checksum mismatch", ledger.ErrCorrupt, k)
	case retired:
		return 0, nil, fmt.Errorf("%w: %v written by format %d, %s; this build reads formats 2 and 4: "+
			"drain the root with the build that wrote it, then move it aside and create a new one", ledger.ErrRootMismatch, k, version, what)
	case version > FormatVersion:
		return 0, nil, fmt.Errorf("%w: %v written by format %d, this build reads up to %d", ledger.ErrRootMismatch, k, version, FormatVersion)
	case version == 0:
		return 0, nil, fmt.Errorf("%w: %v has format version 0", ledger.ErrCorrupt, k)
	}
	return version, data[frameHeader:end], nil
}

// decodeJSON decodes a JSON frame strictly: unknown fields and trailing data are corruption,
// not silence.
func decodeJSON(k kind, data []byte, maxPayload int, v any) (uint16, error) {
	version, payload, err := decodeFrame(k, data, maxPayload)
	if err != nil {
		return 0, err
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err = dec.Decode(v); err == nil && dec.More() {
		err = errors.New("trailing data after the payload")
	}
	if err != nil {
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
	// LastBatch is the id of the last cleanup batch (format 2): every capacity shard has
	// applied at most this one, so the next batch's id is new to all of them.
	LastBatch uint64 `json:"last_batch,omitempty"`
}

// shardState is rows/XX/capacity.state (format 2): its share of the record cap, the slots shard
// XX has handed out (never fewer than the rows naming it), the keys whose admission took one and
// may not have created its row yet, and the last cleanup batch whose releases it applied.
//
// The file holds the record twice, in two halves of shardSlot bytes, each a checksummed frame.
// A change writes the next Seq into both halves with one write, in place, and syncs its data:
// no new file, no rename, no folder sync. The record read is the valid half with the higher
// Seq. A crash mid-write (not synced, so its admission has renamed no row yet) leaves halves
// old, new or torn: either record is safe (the new one overstates, its key pending, and is
// recounted). Once synced, both halves hold it: one damaged half loses nothing; both fail closed.
type shardState struct {
	Seq          uint64        `json:"seq"`
	Shard        int           `json:"shard"`
	Quota        int64         `json:"quota"`
	Used         int64         `json:"used"`
	Pending      []pendingSlot `json:"pending,omitempty"`
	AppliedBatch uint64        `json:"applied_batch"`
}

// pendingSlot is one admission whose slot a shard counts before its row is known to exist: the
// key, and the evaluation id of the row it creates, which tells incarnations of a key apart (a
// batch that removed an earlier row erases that row's entry only, never a later admission's).
// An entry without an id (early format 2 records wrote keys alone) stands for any incarnation.
type pendingSlot struct {
	Key          ledger.Key `json:"key"`
	EvaluationID string     `json:"evaluation_id,omitempty"`
}

// UnmarshalJSON reads an entry as written now ({"key":..,"evaluation_id":..}) or as a bare key.
func (p *pendingSlot) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*p = pendingSlot{}
		return json.Unmarshal(b, &p.Key)
	}
	type plain pendingSlot
	return json.Unmarshal(b, (*plain)(p))
}

// is reports whether the entry stands for the row of key k with evaluation id e.
func (p pendingSlot) is(k ledger.Key, e string) bool {
	return p.Key == k && (p.EvaluationID == "" || p.EvaluationID == e)
}

// storedRow is a row state file's payload: the row, the capacity shard whose slot it holds,
// and, while the row is saved or abandoned, its report.
type storedRow struct {
	ledger.Row
	Shard  int    `json:"capacity_shard"`
	Frozen []byte `json:"frozen_report,omitempty"`
}

// batchState is .amiss-cleanup.batch: the rows one cleanup batch removes, written before the
// first removal so a crashed pass is finished, and its capacity released, exactly once.
type batchState struct {
	ID      uint64       `json:"id"`
	Entries []batchEntry `json:"entries"`
}

type batchEntry struct {
	Key          ledger.Key `json:"key"`
	EvaluationID string     `json:"evaluation_id"`
	Index        string     `json:"index,omitempty"`
	// Shard is the capacity shard whose slot the row held.
	Shard int `json:"shard"`
}

const (
	maxRootPayload  = 4 << 10
	maxBatchEntries = 10_000
	maxBatchPayload = maxBatchEntries*256 + 1024
	// maxPending bounds a shard's pending keys. An admission recounts those it can judge from
	// durable rows before adding its own, and all of them once the list reaches
	// maxCautiousPending (3), so more than 3 means unreadable rows (kept until judged).
	maxPending      = 32
	shardSlot       = 4096
	maxShardPayload = shardSlot - frameOverhead
)

// maxSubjectPayload bounds a subject record's JSON: its names (JSON writes a byte as at most six:
// \u003c for '<', \u0001 for a control character) and fixed fields.
const maxSubjectPayload = ledger.MaxSubjectName*6 + 4<<10

// maxRowPayload is the ceiling of a row's JSON: the change and the report (base64) plus
// fixed fields.
func maxRowPayload(l ledger.Limits) int {
	return (l.MaxChangeBytes+2)/3*4 + (l.MaxReportBytes+2)/3*4 + 8<<10
}

// decodeRoot decodes the root state and reports the format that wrote it.
func decodeRoot(data []byte) (rootState, uint16, error) {
	var s rootState
	v, err := decodeJSON(kindRoot, data, maxRootPayload, &s)
	if verr := s.Limits.Validate(); err == nil && verr != nil {
		err = fmt.Errorf("%w: root state holds invalid limits: %v", ledger.ErrCorrupt, verr)
	}
	return s, v, err
}

// decodeShardFile decodes a capacity shard file: the valid half with the higher Seq. A file
// of the wrong size, or with no valid half, is corrupt.
func decodeShardFile(data []byte) (shardState, error) {
	if len(data) != 2*shardSlot {
		return shardState{}, fmt.Errorf("%w: %v file of %d bytes, want %d", ledger.ErrCorrupt, kindShard, len(data), 2*shardSlot)
	}
	var best shardState
	var errs []error
	found := false
	for i := range 2 {
		slot := data[i*shardSlot : (i+1)*shardSlot]
		n := int(binary.BigEndian.Uint32(slot[len(frameMagic)+3:]))
		sh, err := shardState{}, fmt.Errorf("payload of %d bytes", n)
		if n <= maxShardPayload {
			sh, err = decodeShard(slot[:frameOverhead+n])
		}
		switch {
		case errors.Is(err, ledger.ErrRootMismatch):
			return shardState{}, err // a newer format: never read as this one
		case err != nil:
			errs = append(errs, fmt.Errorf("copy %d: %v", i+1, err))
		case !found || sh.Seq > best.Seq:
			best, found = sh, true
		}
	}
	if !found {
		return shardState{}, fmt.Errorf("%w: neither copy of the record is valid: %v", ledger.ErrCorrupt, errors.Join(errs...))
	}
	return best, nil
}

// shardFile is the content of a capacity shard file holding sh: the record, twice.
func shardFile(sh shardState) ([]byte, error) {
	frame, err := encodeJSON(kindShard, sh)
	if err != nil {
		return nil, err
	}
	if len(frame) > shardSlot {
		return nil, fmt.Errorf("%w: capacity shard record of %d bytes", ledger.ErrTooLarge, len(frame))
	}
	out := make([]byte, 2*shardSlot)
	copy(out, frame)
	copy(out[shardSlot:], frame)
	return out, nil
}

func decodeShard(data []byte) (shardState, error) {
	var s shardState
	_, err := decodeJSON(kindShard, data, maxShardPayload, &s)
	switch {
	case err != nil:
	case s.Used < 0 || s.Quota < 0:
		err = fmt.Errorf("%w: capacity shard holds a negative count %d or quota %d", ledger.ErrCorrupt, s.Used, s.Quota)
	case s.Shard < 0 || s.Shard >= shardCount:
		err = fmt.Errorf("%w: capacity shard number %d", ledger.ErrCorrupt, s.Shard)
	case len(s.Pending) > maxPending:
		err = fmt.Errorf("%w: capacity shard holds %d pending keys", ledger.ErrCorrupt, len(s.Pending))
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

// decodeRow decodes the row state file of key and checks it as stored (ledger.StoredRow.Check)
// and its capacity shard's number.
func decodeRow(data []byte, key ledger.Key, l ledger.Limits) (storedRow, error) {
	var s storedRow
	if _, err := decodeJSON(kindRow, data, maxRowPayload(l), &s); err != nil {
		return storedRow{}, err
	}
	if s.Shard < 0 || s.Shard >= shardCount {
		return storedRow{}, fmt.Errorf("%w: row names capacity shard %d", ledger.ErrCorrupt, s.Shard)
	}
	if err := (&ledger.StoredRow{Row: s.Row, Report: s.Frozen}).Check(key, l); err != nil {
		return storedRow{}, err
	}
	return s, nil
}

func encodeRow(s *storedRow, l ledger.Limits) ([]byte, error) {
	p, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("localfs: encode row: %w", err)
	}
	if len(p) > maxRowPayload(l) {
		return nil, fmt.Errorf("%w: row state of %d bytes, ceiling %d", ledger.ErrTooLarge, len(p), maxRowPayload(l))
	}
	return encodeFrame(kindRow, p), nil
}

// sweepState is .amiss-maintenance.state: where the next cleanup lap and the next Prepare's
// debris collection start. It is advisory: a lost or damaged one only makes them start
// elsewhere; every lap still covers every row once.
type sweepState struct {
	LapShard    int    `json:"lap_shard"`
	LapRow      string `json:"lap_row,omitempty"`
	DebrisShard int    `json:"debris_shard"`
}

func decodeSweep(data []byte) (sweepState, error) {
	var s sweepState
	_, err := decodeJSON(kindSweep, data, maxRootPayload, &s)
	if err == nil && (s.LapShard < 0 || s.LapShard >= shardCount || s.DebrisShard < 0 || s.DebrisShard >= shardCount ||
		(s.LapRow != "" && len(s.LapRow) != 64)) {
		err = fmt.Errorf("%w: maintenance state names shards %d and %d", ledger.ErrCorrupt, s.LapShard, s.DebrisShard)
	}
	return s, err
}

// shardCount is the number of row shards, and of capacity shards: one per first key byte.
const shardCount = 256
