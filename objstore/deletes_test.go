package objstore_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// refusingStore stands for a store that will not delete some object's versions (a legal hold,
// a bucket policy): a DeleteObjects request deletes every version it names but those, and
// answers 200 with a per-key error for each of them, as S3 does.
type refusingStore struct {
	base  http.RoundTripper
	clock ledger.Clock

	mu     sync.Mutex
	refuse string // the object (a suffix of its key) whose versions are not deleted
}

func (s *refusingStore) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	refuse := s.refuse
	s.mu.Unlock()
	if refuse == "" || !isBatchDelete(r) {
		return s.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var req struct {
		Objects []struct {
			Key       string `xml:"Key"`
			VersionID string `xml:"VersionId"`
		} `xml:"Object"`
	}
	if err := xml.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var out strings.Builder
	out.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	for _, o := range req.Objects {
		if strings.HasSuffix(o.Key, refuse) {
			fmt.Fprintf(&out, "<Error><Key>%s</Key><VersionId>%s</VersionId><Code>AccessDenied</Code><Message>Access Denied</Message></Error>", o.Key, o.VersionID)
			continue
		}
		if err := minioRaw.RemoveObject(r.Context(), testBucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID}); err != nil {
			return nil, err
		}
	}
	out.WriteString(`</DeleteResult>`)
	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	h.Set("Date", s.clock.Now().UTC().Format(http.TimeFormat))
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: h, Body: io.NopCloser(bytes.NewReader([]byte(out.String()))),
		ContentLength: int64(out.Len()), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// TestAVersionTheStoreWillNotDeleteStopsNoOtherRemoval: one row whose versions the store
// refuses to delete (a per-key error inside a 200 answer to DeleteObjects) is kept and
// reported, as a damaged row is; every other removal of the pass goes on, with its slot given
// back, so one object cannot stop cleanup for ever.
func TestAVersionTheStoreWillNotDeleteStopsNoOtherRemoval(t *testing.T) {
	w := newWorld(t)
	runner, _ := w.handle("runner", 0, nil)
	refusing := &refusingStore{clock: w.store}
	cleaner, _, err := w.openVia("cleaner", 0, func(tr *transport) http.RoundTripper { refusing.base = tr; return refusing }, nil)
	if err != nil {
		t.Fatal(err)
	}
	stuck, free := w.delivery(w.store.Now()), w.delivery(w.store.Now())
	for _, d := range []ledger.Delivery{stuck, free} {
		ledgertest.MustComplete(t, runner, w.saved(runner, d, "verdict of "+d.Binding.Identity))
	}
	refusing.mu.Lock()
	refusing.refuse = objstore.RowName(stuck.Key())
	refusing.mu.Unlock()

	w.store.Advance(w.limits.QueueCeiling + objstore.RequestLife + time.Hour)
	reported := false
	for pass := 0; pass < 4; pass++ {
		rep, err := cleaner.Cleanup(w.ctx, "")
		t.Logf("pass %d: removed %d, damaged %d: %v", pass, len(rep.Removed), len(rep.Damaged), err)
		for _, dr := range rep.Damaged {
			reported = reported || strings.HasSuffix(dr.Name, objstore.RowName(stuck.Key()))
		}
		w.store.Advance(5 * time.Minute)
	}
	if _, err := runner.Inspect(w.ctx, free.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
		t.Fatalf("the other row was never removed (%v): one version the store will not delete stops every removal", err)
	}
	if row, err := runner.Inspect(w.ctx, stuck.Key()); err != nil || row.State != ledger.StateDone {
		t.Fatalf("the row the store will not delete: %+v %v, want it kept as it was", row, err)
	}
	if !reported {
		t.Fatalf("the row the store will not delete was never reported")
	}
	w.exact(runner)
}
