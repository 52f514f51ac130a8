package ledger

import (
	"testing"
	"time"
)

func TestAnEndIndexNameSortsByEndAndReadsBack(t *testing.T) {
	k1, k2 := NewKey("r", "s", "1"), NewKey("r", "s", "2")
	early := Row{Key: k2, RetainUntil: time.Unix(0, 999).UTC()}
	late := Row{Key: k1, RetainUntil: time.Unix(1_700_000_000, 5).UTC()}
	if a, b := EndIndexName(&early), EndIndexName(&late); a >= b {
		t.Fatalf("%s sorts after %s: names must sort by retention end", a, b)
	}
	for _, row := range []Row{early, late} {
		end, key, ok := ParseEndIndexName(EndIndexName(&row))
		if !ok || !end.Equal(row.RetainUntil) || key != row.Key {
			t.Fatalf("%s read back as %v %s %v", EndIndexName(&row), end, key.Short(), ok)
		}
	}
	before := Row{Key: k1, RetainUntil: time.Unix(-5, 0)}
	if end, _, ok := ParseEndIndexName(EndIndexName(&before)); !ok || end.UnixNano() != 0 {
		t.Fatalf("an end before 1970 reads back as %v %v, want the epoch", end, ok)
	}
	for _, bad := range []string{"", "123", "x-" + k1.String(), "123-notakey", "123-" + k1.String()[:10]} {
		if _, _, ok := ParseEndIndexName(bad); ok {
			t.Errorf("%q read as an index entry", bad)
		}
	}
}

func TestShardQuotasAddUpToTheRecordCap(t *testing.T) {
	for _, c := range []struct {
		cap    int64
		shards int
	}{{1000, 256}, {255, 256}, {257, 256}, {1000, 16}, {7, 3}} {
		l := Limits{RecordCap: c.cap}
		var sum int64
		lo, hi := c.cap, int64(0)
		for i := range c.shards {
			q := l.ShardQuota(c.shards, i)
			sum += q
			lo, hi = min(lo, q), max(hi, q)
		}
		if sum != c.cap || hi-lo > 1 {
			t.Errorf("cap %d over %d shards: quotas add up to %d, from %d to %d", c.cap, c.shards, sum, lo, hi)
		}
	}
}
