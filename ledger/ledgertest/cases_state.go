package ledgertest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/amiss-ci/amiss/ledger"
)

// Cases of the named state records (ledger.StateStore): read with a version, written only on
// the version read.

func (e *env) states() ledger.StateStore {
	e.t.Helper()
	s, ok := e.l.(ledger.StateStore)
	if !ok {
		e.t.Fatalf("%T does not keep named state records (ledger.StateStore)", e.l)
	}
	return s
}

func (e *env) readState(name string) ledger.StateRecord {
	e.t.Helper()
	r, err := e.states().ReadState(e.ctx, name)
	if err != nil {
		e.t.Fatalf("read state %s: %v", name, err)
	}
	return r
}

func (e *env) writeState(name, data, version string) string {
	e.t.Helper()
	v, err := e.states().WriteState(e.ctx, name, []byte(data), version)
	if err != nil {
		e.t.Fatalf("write state %s at %q: %v", name, version, err)
	}
	if v == "" || v == version {
		e.t.Fatalf("write state %s at %q answered version %q", name, version, v)
	}
	return v
}

func (e *env) stateIs(name, data, version string) {
	e.t.Helper()
	r := e.readState(name)
	if !bytes.Equal(r.Data, []byte(data)) || r.Version != version {
		e.t.Fatalf("state %s: got %q at %q, want %q at %q", name, r.Data, r.Version, data, version)
	}
}

func caseStateIsWrittenOnlyOnTheVersionRead(e *env) {
	const name = "catchup-github-app-1"
	if r := e.readState(name); r.Version != "" || r.Data != nil {
		e.t.Fatalf("a record never written reads %q at %q", r.Data, r.Version)
	}
	v1 := e.writeState(name, "one", "")
	_, err := e.states().WriteState(e.ctx, name, []byte("again"), "")
	wantErr(e.t, "a second creation", err, ledger.ErrConflict)
	e.stateIs(name, "one", v1)

	// Two writers read v1; the first one's write wins, the second's is refused.
	v2 := e.writeState(name, "two", v1)
	_, err = e.states().WriteState(e.ctx, name, []byte("other"), v1)
	wantErr(e.t, "a write on a version another writer replaced", err, ledger.ErrConflict)
	e.stateIs(name, "two", v2)

	// The same bytes written again get a new version: a write held since v1 (whose bytes
	// were "one") cannot land on a record that holds "one" again.
	v3 := e.writeState(name, "one", v2)
	if v3 == v1 {
		e.t.Fatalf("writing the bytes of version %q again answered the same version", v1)
	}
	for _, stale := range []string{v1, v2, "not-a-version"} {
		_, err = e.states().WriteState(e.ctx, name, []byte("late"), stale)
		wantErr(e.t, "a late write on version "+stale, err, ledger.ErrConflict)
	}
	e.stateIs(name, "one", v3)

	// Records persist across a restart and are kept apart by name.
	e.reopen()
	e.stateIs(name, "one", v3)
	if r := e.readState(name + "-other"); r.Version != "" {
		e.t.Fatalf("another name reads %q at %q", r.Data, r.Version)
	}
	e.writeState(name+"-other", "x", "")
	e.stateIs(name, "one", v3)
}

func caseStateOverItsCeilingOrBadlyNamedIsRefusedWhole(e *env) {
	const name = "bounded"
	v := e.writeState(name, "small", "")
	_, err := e.states().WriteState(e.ctx, name, bytes.Repeat([]byte("x"), ledger.MaxStateBytes+1), v)
	wantErr(e.t, "a record over the ceiling", err, ledger.ErrTooLarge)
	e.stateIs(name, "small", v)
	e.writeState(name, strings.Repeat("y", ledger.MaxStateBytes), v)
	for _, bad := range []string{"", "../root", "a/b", ".hidden", "UPPER", strings.Repeat("n", 101)} {
		_, err := e.states().WriteState(e.ctx, bad, []byte("x"), "")
		wantErr(e.t, fmt.Sprintf("write of name %q", bad), err, ledger.ErrInvalid)
		_, err = e.states().ReadState(e.ctx, bad)
		wantErr(e.t, fmt.Sprintf("read of name %q", bad), err, ledger.ErrInvalid)
	}
}

// Writers that read and write the same record at once: every write that was answered with a
// version is one step of a single history, none is lost, none is applied twice.
func caseConcurrentStateWritersLoseNoStep(e *env) {
	const name, writers, steps = "counter", 4, 5
	e.writeState(name, "", "")
	var mu sync.Mutex
	won := 0
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for mine := 0; mine < steps; {
				r, err := e.states().ReadState(e.ctx, name)
				if err != nil {
					errs <- err
					return
				}
				_, err = e.states().WriteState(e.ctx, name, append(r.Data, byte('a'+w)), r.Version)
				if errors.Is(err, ledger.ErrConflict) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mine++
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("writer: %v", err)
	}
	got := e.readState(name).Data
	if len(got) != won || won != writers*steps {
		e.t.Fatalf("record holds %d steps (%q), %d writes were answered", len(got), got, won)
	}
	for w := range writers {
		if n := bytes.Count(got, []byte{byte('a' + w)}); n != steps {
			e.t.Fatalf("writer %d has %d steps in %q, want %d", w, n, got, steps)
		}
	}
}
