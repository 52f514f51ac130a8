package objstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/objstore"
)

// openUpgrade opens a handle on a fixture prefix whose cleanup lap reads one row a pass.
func openUpgrade(t *testing.T, prefix string, clock ledger.Clock) *objstore.Ledger {
	t.Helper()
	ctx := context.Background()
	tr := newTransport(&counter{})
	tr.setStoreClock(clock)
	client, err := objstore.NewClient(ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret, HTTPClient: &http.Client{Transport: tr, Timeout: 2 * time.Minute},
		DisableClockSkewCorrection: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := objstore.Open(ctx, objstore.Config{Client: client, Bucket: testBucket, Prefix: prefix, Limits: fixtureLimits(),
		Clock: clock, Shards: 4, SweepBatch: 1, HighWaterEvery: -1})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// shardFormat is the format version the capacity shard's object was written with: a build of
// an older format refuses a newer one ("written by format N") and takes no slot from it.
func shardFormat(t *testing.T, prefix string, shard int) int {
	t.Helper()
	obj, err := minioRaw.GetObject(context.Background(), testBucket, fmt.Sprintf("%scapacity/%02d.json", prefix, shard), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Version int `json:"v"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	return env.Version
}

// admitAsFormatFive admits d as a format 5 ingress still running during the roll forward
// would: refused when its key's capacity shard was written by format 6 (format 5 fails closed
// on it), else admitted with no index entry in due/ (format 5 wrote none). It reports whether
// the delivery was admitted.
func admitAsFormatFive(t *testing.T, l *objstore.Ledger, prefix string, d ledger.Delivery) bool {
	t.Helper()
	ctx := context.Background()
	if shardFormat(t, prefix, int(d.Key()[1])%4) > 5 {
		return false
	}
	ledgertest.MustAdmit(t, l, d)
	removed := 0
	for v := range minioRaw.ListObjects(ctx, testBucket, minio.ListObjectsOptions{Prefix: prefix + "due/", WithVersions: true, Recursive: true}) {
		if v.Err != nil {
			t.Fatal(v.Err)
		}
		if strings.HasSuffix(v.Key, "-r"+d.Key().String()) {
			if err := minioRaw.RemoveObject(ctx, testBucket, v.Key, minio.RemoveObjectOptions{VersionID: v.VersionID}); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatalf("no due/ entry of %s to take away", d.Key().Short())
	}
	return true
}

// TestRowAdmittedByFormatFiveDuringTheUpgradeLapIsFound: while a fleet rolls forward from
// format 5, a format 5 ingress goes on admitting (it indexes nothing in due/). A row it admits
// once the upgrade lap has passed its key, and that no runner ever takes up (its message ended
// in the dead-letter queue), must still be reported stranded, or the admission refused.
func TestRowAdmittedByFormatFiveDuringTheUpgradeLapIsFound(t *testing.T) {
	requireMinIO(t)
	t.Parallel()
	ctx := context.Background()
	prefix := uploadFixture(t, "testdata/format-v5")
	clock := ledger.NewManualClock(fixtureEpoch.Add(time.Hour))
	cleaner := openUpgrade(t, prefix, clock)
	ingress := openUpgrade(t, prefix, clock)

	// The upgrade lap, one row a pass, until it has passed most of the fixture's rows.
	var after string
	var lost ledger.Delivery
	for i := 0; i < 5; i++ {
		rep, err := cleaner.Cleanup(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(rep.Next), "|")
		if len(parts) < 2 || rep.Done {
			t.Fatalf("pass %d: the lap is not under way (%q)", i, rep.Next)
		}
		after = parts[1]
	}
	// A format 5 ingress admits a delivery whose key the lap has passed, if its key's shard
	// still takes format 5 writes.
	admitted := false
	for i := 6; i < 200 && !admitted; i++ {
		d := fixtureDelivery(i)
		d.SignedAt, d.Binding.Scheme = time.Time{}, "github-sha256" // permanent: no freshness to judge
		if d.Key().String()+".json" < after {
			admitted = admitAsFormatFive(t, ingress, prefix, d)
		}
		if admitted {
			lost = d
		}
	}

	// Its message is lost: nobody claims it. Cleanup goes on for an hour.
	found := false
	for step := 0; step < 12; step++ {
		for cur := ledger.Cursor(""); ; {
			rep, err := cleaner.Cleanup(ctx, cur)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rep.Stranded {
				found = found || s.Key == lost.Key()
			}
			if rep.Done {
				break
			}
			cur = rep.Next
		}
		clock.Advance(5 * time.Minute)
	}
	if admitted && !found {
		t.Fatalf("a row admitted by format 5 behind the upgrade lap was never reported stranded (its verdict waits for a lap a month away)")
	}
}
