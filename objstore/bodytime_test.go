package objstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// rootObject reads the root object under prefix as stored: its format version and limits.
func rootObject(t *testing.T, prefix string) (int, ledger.Limits) {
	t.Helper()
	obj, err := minioRaw.GetObject(context.Background(), testBucket, prefix+"root.json", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		V    int `json:"v"`
		Data struct {
			Limits ledger.Limits `json:"limits"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	return env.V, env.Data.Limits
}

// A ledger of every released format, created before body times, adopts a configured body-age
// ceiling when it is first opened with one: the root records the ceiling and when (in format
// 3, which older builds refuse to read), the rows written as permanent stay permanent, a body
// delivery admitted afterwards is bounded but held through the grace, and a handle opened under
// the older policy stops at its next re-read of the root. Any later change of the recorded
// ceiling, switching it off included, fails closed.
func TestReleasedFormatsAdoptBodyTimes(t *testing.T) {
	requireMinIO(t)
	dirs, _ := filepath.Glob(filepath.Join("testdata", "format-v[12]"))
	if len(dirs) != 2 {
		t.Fatalf("fixtures of formats 1 and 2: found %v", dirs)
	}
	ctx := context.Background()
	for _, src := range dirs {
		t.Run(filepath.Base(src), func(t *testing.T) {
			prefix := uploadFixture(t, src)
			clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
			before := openFixture(t, prefix, clock, false, nil) // a handle of the older policy
			withBody := fixtureLimits()
			withBody.BodyAgeCeiling = 4 * time.Hour
			l, err := openFixtureWith(prefix, clock, false, nil, withBody)
			if err != nil {
				t.Fatalf("open with a body-age ceiling: %v", err)
			}
			v, recorded := rootObject(t, prefix)
			if v != objstore.FormatVersion || recorded.BodyAgeCeiling != withBody.BodyAgeCeiling ||
				!recorded.BodyTimesSince.Equal(clock.Now()) {
				t.Fatalf("root after adoption: format %d, limits %+v", v, recorded)
			}
			// Every fixture row keeps its lifetime.
			for i := range fixtureStates {
				d := fixtureDelivery(i)
				row, err := l.Inspect(ctx, d.Key())
				if err != nil || row.Permanent != d.SignedAt.IsZero() || row.BodyTime {
					t.Fatalf("delivery %d after adoption: %+v %v", i, row, err)
				}
			}
			// A body delivery is bounded; one as old as the window is still held through the grace.
			body := []byte(`{"repository":{"pushed_at":1}}`)
			d := ledger.Delivery{Binding: ledger.Binding{Route: "fixture", Scheme: "github-sha256",
				Identity: ledger.SumBody(body).String(), BodyDigest: ledger.SumBody(body)},
				Change: []byte(`{"repository":"acme/app","sha":"` + strings.Repeat("f", 40) + `"}`),
				BodyAt: clock.Now().Add(-withBody.BodyAgeCeiling)}
			a, err := l.Admit(ctx, d)
			if err != nil || a.Outcome != ledger.Admitted || a.Lifetime != ledger.LifetimeBody || !a.RetainUntil.Equal(clock.Now().Add(ledger.BodyPolicyGrace)) {
				t.Fatalf("body admission after adoption: %+v", a)
			}
			// The handle of the older policy re-reads the root and stops.
			objstore.RereadRootNextForTest(before)
			other := fixtureDelivery(0)
			other.Binding.Identity = "after-adoption"
			if _, err := before.Admit(ctx, other); !errors.Is(err, ledger.ErrRootMismatch) {
				t.Fatalf("a handle of the older policy admitted after the adoption: %v", err)
			}
			// Reopening with the adopting configuration opens as recorded; every other
			// ceiling, off included, fails closed.
			if _, err := openFixtureWith(prefix, clock, false, nil, withBody); err != nil {
				t.Fatalf("reopen: %v", err)
			}
			for _, ceiling := range []time.Duration{0, time.Hour} {
				other := withBody
				other.BodyAgeCeiling = ceiling
				if _, err := openFixtureWith(prefix, clock, false, nil, other); !errors.Is(err, ledger.ErrRootMismatch) {
					t.Fatalf("open with a body-age ceiling of %s: %v", ceiling, err)
				}
			}
		})
	}
}
