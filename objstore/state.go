package objstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/amiss-ci/amiss/ledger"
)

// Named state records (ledger.StateStore): state/<name>.json under the prefix, one object each.
// The version is the object's ETag: a write is a PUT with If-None-Match: * (no record yet) or
// If-Match on the ETag read, so a PUT held in flight that lands after another write names an
// ETag that is gone and is refused. Every body carries a fresh write token, so two writes of
// the same data never share an ETag (a version never comes back), and a write whose answer was
// lost is recognised as one's own when read back. The records are never deleted; the bucket's
// lifecycle rule expires their noncurrent versions as it does the rows'.

var _ ledger.StateStore = (*Ledger)(nil)

const (
	statePrefix = "state/"
	kindState   = "named-state"
)

// namedState is the data of a named state record.
type namedState struct {
	Data []byte `json:"data"`
}

func stateObject(name string) string { return statePrefix + name + ".json" }

// ReadState implements ledger.StateStore.
func (l *Ledger) ReadState(ctx context.Context, name string) (ledger.StateRecord, error) {
	if err := ledger.CheckState(name, nil); err != nil {
		return ledger.StateRecord{}, err
	}
	o, err := l.s.get(ctx, stateObject(name))
	if errors.Is(err, errNotFound) {
		return ledger.StateRecord{}, nil
	}
	if err != nil {
		return ledger.StateRecord{}, fmt.Errorf("read state %s: %w", name, err)
	}
	var s namedState
	if err := decode(l.s.key(stateObject(name)), kindState, o.body, &s); err != nil {
		return ledger.StateRecord{}, fmt.Errorf("read state %s: %w", name, err)
	}
	if o.etag == "" {
		return ledger.StateRecord{}, fmt.Errorf("read state %s: %w: the store answered no ETag", name, ledger.ErrUnavailable)
	}
	return ledger.StateRecord{Data: s.Data, Version: o.etag}, nil
}

// WriteState implements ledger.StateStore.
func (l *Ledger) WriteState(ctx context.Context, name string, data []byte, version string) (string, error) {
	if err := ledger.CheckState(name, data); err != nil {
		return "", err
	}
	body, tok, err := l.encode(kindState, namedState{Data: data})
	if err != nil {
		return "", err
	}
	etag, err := l.s.put(ctx, stateObject(name), body, tok, version, version == "")
	if errors.Is(err, errRaced) {
		return "", fmt.Errorf("write state %s: %w", name, ledger.ErrConflict)
	}
	if err != nil {
		return "", fmt.Errorf("write state %s: %w", name, err)
	}
	return etag, nil
}
