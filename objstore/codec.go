package objstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"

	"github.com/amiss-ci/amiss/ledger"
)

// FormatVersion is the object format this code writes; a newer one fails closed.
const FormatVersion = 1

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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encode(kind, token string, data any) ([]byte, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("objstore: encode %s: %w", kind, err)
	}
	return json.Marshal(envelope{Kind: kind, Version: FormatVersion, Token: token, Data: raw, Sum: crc32.Checksum(raw, castagnoli)})
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
	case crc32.Checksum(env.Data, castagnoli) != env.Sum:
		return fmt.Errorf("%w: %s: checksum mismatch", ledger.ErrCorrupt, name)
	}
	dec := json.NewDecoder(bytes.NewReader(env.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ledger.ErrCorrupt, name, err)
	}
	return nil
}

// Object kinds and their data.
const (
	kindRoot        = "root"
	kindShard       = "capacity-shard"
	kindRow         = "row"
	kindMaintenance = "maintenance"
	kindBatch       = "cleanup-batch"
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
}

type pendingEntry struct {
	Key ledger.Key `json:"key"`
	At  int64      `json:"at_unix_nano"`
}

type rowData struct {
	Row    ledger.Row `json:"row"`
	Report []byte     `json:"report,omitempty"`
	// Shard is the capacity shard whose slot the row holds.
	Shard int `json:"shard"`
}

type maintenanceData struct {
	Owner string `json:"owner"`
	Fence uint64 `json:"fence"`
	Until int64  `json:"until_unix_nano"`
}

type batchData struct {
	ID      uint64       `json:"id"`
	Fence   uint64       `json:"fence"`
	Entries []batchEntry `json:"entries"`
	Done    bool         `json:"done"`
}

type batchEntry struct {
	Key          ledger.Key `json:"key"`
	EvaluationID string     `json:"evaluation_id"`
	Shard        int        `json:"shard"`
	Index        string     `json:"index,omitempty"`
}
