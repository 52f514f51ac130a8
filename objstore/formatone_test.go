package objstore_test

import (
	"bytes"
	"encoding/json"
	"hash/crc32"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/objstore"
)

// Format 1 objects met by this build while a fleet rolls forward: pending entries that name no
// reservation and rows created with If-None-Match alone.

// v1Object frames payload as format 1 wrote an object of the given kind: the JSON data, a
// write token, and the CRC-32C of the data.
func v1Object(t *testing.T, kind, token string, payload any) []byte {
	t.Helper()
	data, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"kind": kind, "v": 1, "token": token, "data": json.RawMessage(data),
		"crc32c": crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// v1Shard encodes a capacity shard as format 1 wrote it: pending entries name no reservation.
func v1Shard(t *testing.T, quota, used int64, pending ledger.Key, at time.Time) []byte {
	t.Helper()
	return v1Object(t, "capacity-shard", "v1-writer", map[string]any{"quota": quota, "used": used, "applied_batch": 0,
		"pending": []map[string]any{{"key": pending, "at_unix_nano": at.UnixNano()}}})
}

// v1Row encodes a row as format 1 wrote it: created with If-None-Match alone, no reservation.
func v1Row(t *testing.T, row ledger.Row) []byte {
	t.Helper()
	return v1Object(t, "row", "v1-row-writer", map[string]any{"row": row, "shard": 0})
}

// TestFormatOnePendingEntryHoldsNoSecondSlot: a format 1 admission took a slot
// (its pending entry names no reservation) and died before creating its row; the ledger is
// upgraded, and the sender's retry of the same delivery is admitted by format 2 code within
// the grace. The recount judges the format 1 entry "its row exists" (any row at the key) and
// keeps its slot, besides the slot the format 2 admission took: one row, two slots, for good.
// After recount and cleanup the capacity record must count the rows exactly.
func TestFormatOnePendingEntryHoldsNoSecondSlot(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	l, _ := w.handle("ingress", 0, nil)
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(time.Time{})
	// The format 1 admission of d, cut off after its slot: used 1, d pending, no row.
	body := v1Shard(t, w.limits.RecordCap, 1, d.Key(), w.store.Now())
	if _, err := minioRaw.PutObject(w.ctx, testBucket, w.prefix+"capacity/00.json", bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	w.store.Advance(30 * time.Second)
	w.admit(l, d, ledger.Admitted)
	w.store.Advance(10 * time.Minute) // every pending entry is recounted from here on
	w.cleanLap(cleaner)
	w.exact(cleaner)
}

// TestFormatOneAdmissionInFlightCannotLandARowWithoutASlot: during the rollout of format 2,
// a format 1 admission (old code still running) has taken its slot (a pending entry with no
// reservation) and its row create (If-None-Match: *) is held in flight. judgePending frees a
// format 1 entry once it is older than the grace when its key holds nothing ("the format 1
// one died"), with nothing to stop the create from landing afterwards: a void reservation
// written at the empty key would. Interleaving (cap 2, one shard, store time):
//
//	T      format 1 ingress: slot taken (used 1, pending d, no reservation); its row PUT
//	       (If-None-Match: *) is held in the network
//	T+3m   format 2 cleanup: the entry is past the grace, the key is empty: slot given back
//	       (used 0)
//	T+3m   the held row PUT lands (signed 3 minutes ago, inside SigV4's 15): a row no slot
//	       counts; two more deliveries are admitted: 3 rows under a cap of 2
func TestFormatOneAdmissionInFlightCannotLandARowWithoutASlot(t *testing.T) {
	w := newWorld(t)
	w.shards = 1
	w.limits.RecordCap = 2
	cleaner, _ := w.handle("cleaner", 0, nil)

	d := w.delivery(time.Time{})
	body := v1Shard(t, w.limits.RecordCap, 1, d.Key(), w.store.Now())
	if _, err := minioRaw.PutObject(w.ctx, testBucket, w.prefix+"capacity/00.json", bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	row, _, err := ledger.NewRow(d, w.limits, w.store.Now(), "format1evaluation0000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	held := v1Row(t, row) // the format 1 ingress's row PUT, held in flight

	w.store.Advance(3 * time.Minute)
	w.cleanLap(cleaner)

	client, err := objstore.NewClient(w.ctx, objstore.ClientConfig{Region: "us-east-1", Endpoint: minioEndpoint, PathStyle: true,
		AccessKey: minioUser, SecretKey: minioSecret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutObject(w.ctx, &s3.PutObjectInput{Bucket: aws.String(testBucket), Key: aws.String(w.prefix + objstore.RowName(d.Key())),
		Body: bytes.NewReader(held), ContentLength: aws.Int64(int64(len(held))), IfNoneMatch: aws.String("*")}); err != nil {
		t.Logf("the held format 1 create was refused: %v", err)
		w.exact(cleaner)
		return
	}
	for range 2 {
		if a, err := cleaner.Admit(w.ctx, w.delivery(time.Time{})); err != nil || a.Outcome != ledger.Admitted {
			break
		}
	}
	w.store.Advance(10 * time.Minute)
	w.cleanLap(cleaner)
	st, err := cleaner.Stats(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows > w.limits.RecordCap || st.CapacityUsed != st.Rows {
		t.Fatalf("the held format 1 create landed on the key whose entry was freed: %d rows under a cap of %d, capacity records %d",
			st.Rows, w.limits.RecordCap, st.CapacityUsed)
	}
}
