package objstore

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/amiss-ci/amiss/ledger"
)

// FormatVersion is the object format this code writes; a newer one fails closed. Format 2
// added reservations (a row is created only over the reservation of its key, whose pending
// capacity entry names it), kept the report of an abandoned row, and deletes by version id.
// Format 3 added body times: the root records a body-age ceiling (and, for a root that adopted
// one, when), and a row may be bounded by a provider-set time inside its signed body. Format 4
// keeps a void reservation at its key for as long as an admission's row write may wait on it
// (only a void that says no slot was taken is removed), where format 3 removed every void a
// request's life after it was voided: a format 3 build reading a format 4 object fails closed
// ("written by format 4"), so no older cleaner removes a void that must stay. Format 5 adds
// the subject records (subjects/<key>.json, subjects.go) and superseded rows: a format 4
// build refuses their objects ("written by format 5") rather than take a superseded row for a
// damaged one. Format 6 indexes every key and subject record by when cleanup must next look at
// it (due/, written by the admission and by cleanup itself), keeps in a finished row the
// subject records it was published to, and removes a void a week after it was written: a format
// 5 build refuses its objects ("written by format 6"). Objects of formats 1 to 5 are read as
// they are.
const FormatVersion = 6

// maxObjectBytes bounds every object the ledger reads.
const maxObjectBytes = 8 << 20

// envelope is every ledger object: a kind, a format version, a write token (so a writer can
// recognise its own write after a lost answer), the data, and a CRC-32C of the data.
type envelope struct {
	Kind    string          `json:"kind"`
	Version int             `json:"v"`
	Token   string          `json:"token"`
	Data    json.RawMessage `json:"data"`
	Sum     uint32          `json:"crc32c"`
}

func encode(kind, token string, data any) ([]byte, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("objstore: encode %s: %w", kind, err)
	}
	return json.Marshal(envelope{Kind: kind, Version: FormatVersion, Token: token, Data: raw, Sum: ledger.Checksum(raw)})
}

// decode checks an object's envelope and decodes its data strictly. Failures wrap
// ledger.ErrCorrupt (ledger.ErrRootMismatch for a newer format) and name the object.
func decode(name, kind string, body []byte, v any) error {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%w: %s: not a ledger object: %v", ledger.ErrCorrupt, name, err)
	}
	switch {
	case env.Kind != kind:
		return fmt.Errorf("%w: %s: expected a %s object, found %q", ledger.ErrCorrupt, name, kind, env.Kind)
	case env.Version > FormatVersion:
		return fmt.Errorf("%w: %s: written by format %d, this build reads up to %d", ledger.ErrRootMismatch, name, env.Version, FormatVersion)
	case env.Version < 1:
		return fmt.Errorf("%w: %s: format version %d", ledger.ErrCorrupt, name, env.Version)
	case ledger.Checksum(env.Data) != env.Sum:
		return fmt.Errorf("%w: %s: checksum mismatch", ledger.ErrCorrupt, name)
	}
	dec := json.NewDecoder(bytes.NewReader(env.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ledger.ErrCorrupt, name, err)
	}
	return nil
}

// kindOf reads the kind of an object without checking it ("" when it is not an envelope).
func kindOf(body []byte) string {
	var env struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(body, &env) != nil {
		return ""
	}
	return env.Kind
}

// formatOf reads the format version an object was written with, without checking it (0 when
// it is not an envelope).
func formatOf(body []byte) int {
	var env struct {
		Version int `json:"v"`
	}
	if json.Unmarshal(body, &env) != nil {
		return 0
	}
	return env.Version
}

// Object kinds and their data.
const (
	kindRoot        = "root"
	kindShard       = "capacity-shard"
	kindRow         = "row"
	kindMaintenance = "maintenance"
	kindBatch       = "cleanup-batch"
	kindReservation = "reservation"
	kindSweep       = "sweep-position"
	kindSubject     = "subject"
	kindSchedule    = "cleanup-schedule"
)

type rootData struct {
	Limits    ledger.Limits `json:"limits"`
	Shards    int           `json:"shards"`
	CreatedAt int64         `json:"created_at_unix_nano"`
	HighWater int64         `json:"high_water_unix_nano"`
}

// shardData is one capacity shard: its share of the record cap, the slots it has handed out
// (never fewer than the rows admitted through it), the admissions whose row may not exist yet,
// and the last cleanup batch whose release it applied.
type shardData struct {
	Quota        int64          `json:"quota"`
	Used         int64          `json:"used"`
	Pending      []pendingEntry `json:"pending,omitempty"`
	AppliedBatch uint64         `json:"applied_batch"`
	// HighWater is the high-water of the last cleanup that recounted the shard: an admission
	// reads it with the shard and refuses a request it makes stale, so a clock that steps back
	// cannot let a replay in through a handle's copy of the root, however old.
	HighWater int64 `json:"high_water_unix_nano,omitempty"`
}

// pendingEntry is an admission that took a slot and may not have created its row yet. The
// reservation names the object the admission wrote at the row's key before taking the slot
// (format 1 entries have none).
type pendingEntry struct {
	Key         ledger.Key `json:"key"`
	At          int64      `json:"at_unix_nano"`
	Reservation string     `json:"reservation,omitempty"`
}

type rowData struct {
	Row    ledger.Row `json:"row"`
	Report []byte     `json:"report,omitempty"`
	// Shard is the capacity shard whose slot the row holds.
	Shard int `json:"shard"`
	// Reservation is the reservation the row was created over (empty for format 1 rows), and
	// ReservedAt when it landed, by the store's clock (at the latest): the key is not emptied
	// until every request that could write that reservation again has expired.
	Reservation string `json:"reservation,omitempty"`
	ReservedAt  int64  `json:"reserved_at_unix_nano,omitempty"`
	// Due says the admission indexed the key in due/ before it made the row (format 6), so
	// its end needs no end-time entry (ended/).
	Due bool `json:"due,omitempty"`
	// Subjects are the subject records the row's verdict asked to be published to, as the
	// handle that finished the row knew them (format 6): cleanup looks at each once the row is
	// finished.
	Subjects []ledger.SubjectKey `json:"subjects,omitempty"`
}

// reservationData is what an admission writes at a new key before it takes a slot: the row is
// then created only over this very object (If-Match on its ETag). Recounting a pending entry
// whose admission is over marks the reservation void (If-Match again), so a row write held in
// flight can never land after its slot was given back.
//
// A void stays at its key until a later admission of the key takes it over, or voidLife after
// it was written: were the key emptied sooner, a copy of the reservation's PUT delivered late
// (its bytes, so its ETag, are the same in every attempt) could create it again, and a row
// write held in flight over it would land without a slot. A week is far longer than the life of
// any request and than any disagreement of the store's nodes. A void marked NoRowWrite is
// removed at once.
type reservationData struct {
	ID   string `json:"id"`
	At   int64  `json:"at_unix_nano"`
	Void bool   `json:"void,omitempty"`
	// VoidedAt is when it was voided, by the voiding handle's reading of the store's clock
	// (for operators; nothing is decided on it).
	VoidedAt int64 `json:"voided_at_unix_nano,omitempty"`
	// NoRowWrite, on a void, says that no admission that reserved this key since it was last
	// empty can have sent a row write: the admission that voided it sent none (it took no
	// slot), and its reservation was created on the empty key or over a void that said the
	// same. No row write can then wait on any reservation the key held, and cleanup may
	// remove the void.
	NoRowWrite bool `json:"no_row_write,omitempty"`
}

type maintenanceData struct {
	Owner string `json:"owner"`
	Fence uint64 `json:"fence"`
	Until int64  `json:"until_unix_nano"`
}

// sweepData is the state of cleanup's safety-net sweep (cleanup.go): the last row (a row
// object's name without the rows prefix) and subject record a lap under way read ("" from the
// first, lapDone past the last), whether a lap is under way, and when the last one ended.
// Format 5 went round in laps pass after pass (After and Subjects only): read as a ledger whose
// lap never ended.
type sweepData struct {
	After    string `json:"after"`
	Subjects string `json:"subjects,omitempty"`
	InLap    bool   `json:"in_lap,omitempty"`
	LapEnded int64  `json:"lap_ended_unix_nano,omitempty"`
	// Unfinished is the oldest rows (at most unfinishedKept) cleanup's looks found unfinished,
	// oldest first: the rows each pass reads again for the oldest unfinished row it reports
	// (unfinished.go). Not part of the lap's position: a lap's cursor does not carry it.
	Unfinished []unfinishedRow `json:"unfinished,omitempty"`
}

// unfinishedRow is one row cleanup found unfinished: its key and its admission time (Unix
// nanoseconds, the row's CreatedAt when it was last read).
type unfinishedRow struct {
	Key        string `json:"key"`
	AdmittedAt int64  `json:"admitted_unix_nano"`
}

// scheduleData is one part of cleanup's own schedule: the keys and subject records it is to
// look at again, each no sooner than its time (all of them by the time the part's name says).
type scheduleData struct {
	Items []scheduleItem `json:"items"`
}

// scheduleItem is one look cleanup has scheduled: a row's key (Kind "look": is it finished,
// stranded, a reservation to tidy? "remove": past its retention?) or a subject record
// ("subject"), at At (Unix nanoseconds, the store's clock). A removal names the version judged
// finished (removable at At if it is still the latest then), its evaluation, shard and
// retention end.
type scheduleItem struct {
	Kind       string `json:"kind"`
	Key        string `json:"key"`
	At         int64  `json:"at_unix_nano"`
	Version    string `json:"version,omitempty"`
	Evaluation string `json:"evaluation_id,omitempty"`
	Shard      int    `json:"shard,omitempty"`
	End        int64  `json:"end_unix_nano,omitempty"`
}

type batchData struct {
	ID      uint64       `json:"id"`
	Fence   uint64       `json:"fence"`
	Entries []batchEntry `json:"entries"`
	Done    bool         `json:"done"`
}

// batchEntry is one row a cleanup batch judged removable: the exact version that was read and
// judged, and the index entries (with their versions) to drop with it. Format 1 entries name
// no version and one index entry by name: they are judged again when applied.
type batchEntry struct {
	Key          ledger.Key  `json:"key"`
	EvaluationID string      `json:"evaluation_id"`
	Shard        int         `json:"shard"`
	Version      string      `json:"version,omitempty"`
	Index        string      `json:"index,omitempty"`
	Indexes      []indexData `json:"indexes,omitempty"`
	// Older are the versions below Version when the batch was written (format 6: listed
	// then, Version the latest), deleted before it.
	Older  []string `json:"older,omitempty"`
	Listed bool     `json:"listed,omitempty"`
}

type indexData struct {
	Name     string   `json:"name"`
	Versions []string `json:"versions"`
}
