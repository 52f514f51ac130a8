package ledger

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// What every backend computes the same way about the records it keeps: the end-time index's
// entry names, the checksum its records carry and a capacity shard's share of the record cap.
// Where they are stored, and how a record is framed around its checksum, stay the backend's.

// EndIndexName is the name of a finished row's entry in the end-time index, which cleanup lists
// up to its now instead of reading every row: <end>-<key>, the row's retention end in Unix
// nanoseconds (20 digits, zero before 1970, so names sort by end), a dash and the row's key.
func EndIndexName(row *Row) string {
	return fmt.Sprintf("%020d-%s", max(row.RetainUntil.UnixNano(), 0), row.Key)
}

// ParseEndIndexName reads an end-time index entry's name (EndIndexName): the retention end and
// the key, or ok false for a name that is not one.
func ParseEndIndexName(name string) (end time.Time, key Key, ok bool) {
	endS, keyS, ok := strings.Cut(name, "-")
	n, err1 := strconv.ParseInt(endS, 10, 64)
	key, err2 := ParseKey(keyS)
	if !ok || err1 != nil || err2 != nil {
		return time.Time{}, Key{}, false
	}
	return time.Unix(0, n).UTC(), key, true
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C (Castagnoli) every backend's records carry over their bytes.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ShardQuota is shard i's share of l.RecordCap split over shards capacity shards: the cap
// divided evenly, the remainder one more slot each to the first shards.
func (l Limits) ShardQuota(shards, i int) int64 {
	q := l.RecordCap / int64(shards)
	if int64(i) < l.RecordCap%int64(shards) {
		q++
	}
	return q
}
