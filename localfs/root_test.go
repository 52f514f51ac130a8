package localfs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/ledger/ledgertest"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/faultfs"
)

// TestLockGrowthIsFixed admits and completes 2,000 deliveries (10,000 in the soak) and checks that the root holds
// the three fixed locks plus at most 256 row-lock shards, however many rows there are.
func TestLockGrowthIsFixed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("2,000 deliveries: skipped with -short")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{Clock: ledger.NewManualClock(epoch)})
	defer l.Close()
	// 2,000 keys reach all but a handful of the 256 shards; the soak runs 10,000.
	n := 2_000
	if os.Getenv("AMISS_SOAK") != "" {
		n = 10_000
	}
	for i := range n {
		d := newDelivery(time.Time{})
		ledgertest.MustAdmit(t, l, d)
		c := ledgertest.MustClaim(t, l, d, ledger.Execute)
		ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *c.Lease, "r"))
		if i == 99 || i == n-1 {
			fixed, shards := countLocks(t, dir)
			if fixed != 3 || shards > 256 {
				t.Fatalf("after %d deliveries: %d fixed locks and %d row-lock shards", i+1, fixed, shards)
			}
			t.Logf("after %d deliveries: %d fixed locks, %d row-lock shards", i+1, fixed, shards)
		}
	}
	st, err := l.Stats(ctx)
	if err != nil || st.Rows != int64(n) || st.ByState[ledger.StateDone] != int64(n) {
		t.Fatalf("stats %+v %v", st, err)
	}
}

var shardLock = regexp.MustCompile(`^\.amiss-row-[0-9a-f]{2}\.lock$`)

func countLocks(t *testing.T, dir string) (fixed, shards int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch n := e.Name(); {
		case n == localfs.MaintenanceLock || n == localfs.AdmissionLock || n == localfs.ClockLock:
			fixed++
		case shardLock.MatchString(n):
			shards++
		case strings.HasSuffix(n, ".lock"):
			t.Fatalf("unexpected lock file %s", n)
		}
	}
	return fixed, shards
}

func TestOpenFailsClosed(t *testing.T) {
	ctx := context.Background()
	mk := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "root")
		l := openRoot(t, dir, localfs.Config{})
		ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
		l.Close()
		return dir
	}
	open := func(dir string, limits ledger.Limits) error {
		l, err := localfs.Open(ctx, dir, localfs.Config{Limits: limits})
		if err == nil {
			l.Close()
		}
		return err
	}
	cases := []struct {
		name   string
		damage func(dir string) error
		limits func(l *ledger.Limits)
		want   error
		names  string
	}{
		{"changed record cap", nil, func(l *ledger.Limits) { l.RecordCap++ }, ledger.ErrRootMismatch, localfs.RootFile},
		{"changed signed-age ceiling", nil, func(l *ledger.Limits) { l.SignedAgeCeiling = time.Hour }, ledger.ErrRootMismatch, localfs.RootFile},
		{"damaged root state", flipByte(localfs.RootFile, 30), nil, ledger.ErrCorrupt, localfs.RootFile},
		{"truncated root state", truncate(localfs.RootFile, 3), nil, ledger.ErrCorrupt, localfs.RootFile},
		{"missing root state", func(dir string) error { return os.Remove(filepath.Join(dir, localfs.RootFile)) }, nil, ledger.ErrRootMismatch, localfs.RootFile},
		{"newer format", bumpVersion(localfs.RootFile), nil, ledger.ErrRootMismatch, localfs.RootFile},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := mk(t)
			if c.damage != nil {
				if err := c.damage(dir); err != nil {
					t.Fatal(err)
				}
			}
			limits := testLimits()
			if c.limits != nil {
				c.limits(&limits)
			}
			err := open(dir, limits)
			if !errors.Is(err, c.want) {
				t.Fatalf("open: %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.names) {
				t.Fatalf("error does not name %s: %v", c.names, err)
			}
		})
	}
	// A capacity shard is read by the admissions of its keys and checked by Prepare: a
	// missing or damaged one fails both closed, naming it, and never admits.
	shardCases := []struct {
		name   string
		damage func(dir string) error
		want   error
	}{
		{"missing capacity shard", func(dir string) error { return os.Remove(filepath.Join(dir, shardFile(0x5a))) }, ledger.ErrRootMismatch},
		{"damaged capacity shard (both copies)", func(dir string) error {
			if err := flipByte(shardFile(0x5a), 20)(dir); err != nil {
				return err
			}
			return flipByte(shardFile(0x5a), localfs.ShardSlotForTest+20)(dir)
		}, ledger.ErrCorrupt},
		{"truncated capacity shard", truncate(shardFile(0x5a), 10), ledger.ErrCorrupt},
		{"capacity shard of another folder", func(dir string) error {
			data, err := os.ReadFile(filepath.Join(dir, shardFile(0x11)))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, shardFile(0x5a)), data, 0o600)
		}, ledger.ErrCorrupt},
	}
	for _, c := range shardCases {
		t.Run(c.name, func(t *testing.T) {
			dir := mk(t)
			if err := c.damage(dir); err != nil {
				t.Fatal(err)
			}
			_, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits()})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), shardFile(0x5a)) {
				t.Fatalf("prepare: %v, want %v naming %s", err, c.want, shardFile(0x5a))
			}
			l, err := localfs.Open(ctx, dir, localfs.Config{Limits: testLimits()})
			if err != nil {
				t.Fatalf("open (reads no capacity shard): %v", err)
			}
			defer l.Close()
			d := deliveryInShard(0x5a)
			a, err := l.Admit(ctx, d)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), shardFile(0x5a)) {
				t.Fatalf("admit into the damaged shard: %+v %v, want %v", a, err, c.want)
			}
			if _, err := l.Inspect(ctx, d.Key()); !errors.Is(err, ledger.ErrUnknownDelivery) {
				t.Fatalf("a refused admission stored a row: %v", err)
			}
		})
	}
	// One damaged copy of a capacity shard's record loses nothing: the other holds the same.
	for _, at := range []int{20, localfs.ShardSlotForTest + 20} {
		t.Run(fmt.Sprintf("one damaged copy of a capacity shard at byte %d", at), func(t *testing.T) {
			dir := mk(t)
			l := openRoot(t, dir, localfs.Config{})
			in := deliveryInShard(0x5a)
			ledgertest.MustAdmit(t, l, in)
			l.Close()
			if err := flipByte(shardFile(0x5a), at)(dir); err != nil {
				t.Fatal(err)
			}
			p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits()})
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			defer p.Close()
			st, err := p.Stats(ctx)
			if err != nil || st.CapacityUsed != st.Rows || st.Rows != 2 {
				t.Fatalf("stats %+v %v: want both rows counted", st, err)
			}
		})
	}
	t.Run("missing root state is not re-created over rows", func(t *testing.T) {
		dir := mk(t)
		os.Remove(filepath.Join(dir, localfs.RootFile))
		_, err := localfs.Open(ctx, dir, localfs.Config{Limits: testLimits(), Create: true})
		if !errors.Is(err, ledger.ErrRootMismatch) {
			t.Fatalf("create over existing rows: %v", err)
		}
	})
}

func flipByte(name string, at int) func(string) error {
	return func(dir string) error {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data[at%len(data)] ^= 0x01
		return os.WriteFile(p, data, 0o600)
	}
}

func truncate(name string, n int) func(string) error {
	return func(dir string) error { return os.Truncate(filepath.Join(dir, name), int64(n)) }
}

// bumpVersion rewrites a file's format version to one newer than this build reads, with a
// valid checksum, as a future release would write it.
func bumpVersion(name string) func(string) error {
	return func(dir string) error {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(p, localfs.ReframeForTest(data, localfs.FormatVersion+1), 0o600)
	}
}

// TestDamagedFilesNameTheFile damages each kind of file (truncated, bit-flipped, oversized)
// and checks the operation that reads it fails with an error naming it, without panicking.
func TestDamagedFilesNameTheFile(t *testing.T) {
	ctx := context.Background()
	damages := map[string]func(p string) error{
		"truncated":   func(p string) error { return os.Truncate(p, 7) },
		"empty":       func(p string) error { return os.Truncate(p, 0) },
		"bit-flipped": func(p string) error { return flipByte(filepath.Base(p), 17)(filepath.Dir(p)) },
		"oversized":   func(p string) error { return appendBytes(p, 1<<20) },
		"garbage":     func(p string) error { return os.WriteFile(p, []byte("not a ledger file"), 0o600) },
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "root")
			clock := ledger.NewManualClock(epoch)
			l := openRoot(t, dir, localfs.Config{Clock: clock})
			defer l.Close()
			d := newDelivery(time.Time{})
			ledgertest.MustAdmit(t, l, d)
			c := ledgertest.MustClaim(t, l, d, ledger.Execute)
			ledgertest.MustSave(t, l, *c.Lease, "verdict")
			clock.Advance(time.Minute)
			key := d.Key().String()
			// The saved report is kept inside the row's state file.
			state := filepath.Join(dir, localfs.RowsDir, key[:2], key+".state")
			if err := damage(state); err != nil {
				t.Fatal(err)
			}
			_, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "w2", time.Minute)
			if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), state) {
				t.Fatalf("claim over a %s saved state: %v", name, err)
			}
			_, err = l.Inspect(ctx, d.Key())
			if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), state) {
				t.Fatalf("inspect of a %s state: %v", name, err)
			}
			v, err := l.Verify(ctx, nil)
			if err != nil || v.OK() {
				t.Fatalf("verify of a %s root: %v %+v", name, err, v)
			}
			for _, f := range []string{shardFile(d.Key()[0]), localfs.RootFile} {
				if err := damage(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
				if f != localfs.RootFile && name == "bit-flipped" {
					// A capacity shard keeps its record twice; one damaged copy loses nothing
					// (see TestOpenFailsClosed), so damage the other as well.
					if err := flipByte(f, localfs.ShardSlotForTest+17)(dir); err != nil {
						t.Fatal(err)
					}
				}
				_, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits()})
				if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), f) {
					t.Fatalf("prepare with a %s %s: %v", name, f, err)
				}
			}
		})
	}
}

func appendBytes(p string, n int) error {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(make([]byte, n))
	return err
}

// TestPrepareCollectsDebrisUnderTheWritersLock leaves temporary files behind and checks prepare
// removes them, keeps a live row and its report, and leaves a shard alone while its row lock is
// held (a writer may be in the middle of it).
func TestPrepareCollectsDebrisUnderTheWritersLock(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{})
	live := newDelivery(time.Time{})
	ledgertest.MustAdmit(t, l, live)
	ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, live, ledger.Execute).Lease, "live verdict")
	done := newDelivery(time.Time{})
	ledgertest.MustAdmit(t, l, done)
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, done, ledger.Execute).Lease, "r"))
	l.Close()
	shard := func(d ledger.Delivery) string {
		return filepath.Join(dir, localfs.RowsDir, d.Key().String()[:2])
	}
	liveState := filepath.Join(shard(live), live.Key().String()+".state")
	data, err := os.ReadFile(liveState)
	if err != nil {
		t.Fatal(err)
	}
	tmpRow := filepath.Join(shard(done), done.Key().String()+".state.tmp-0123456789abcdef")
	tmpRoot := filepath.Join(dir, localfs.RootFile+".tmp-0123456789abcdef")
	for _, p := range []string{tmpRow, tmpRoot} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// While the temporary row's shard is locked by a writer, prepare must not touch it.
	release, err := localfs.HoldRowLockForTest(ctx, dir, done.Key())
	if err != nil {
		t.Fatal(err)
	}
	_, err = localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits(), LockWait: 100 * time.Millisecond})
	if !errors.Is(err, ledger.ErrBusy) {
		t.Fatalf("prepare with a shard held: %v, want ErrBusy", err)
	}
	if _, err := os.Stat(tmpRow); err != nil {
		t.Fatalf("prepare removed %s while its writer's lock was held", tmpRow)
	}
	release()
	p, err := localfs.Prepare(ctx, dir, localfs.Config{Limits: testLimits()})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer p.Close()
	for _, gone := range []string{tmpRow, tmpRoot} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("prepare left %s", gone)
		}
	}
	if _, err := os.Stat(liveState); err != nil {
		t.Fatalf("prepare removed a live row: %v", err)
	}
	c, err := p.Claim(ctx, live.Key(), live.Binding.Digest(), "p", time.Minute)
	if err != nil || c.Outcome != ledger.Busy {
		// The saver's lease is still live: the next publisher waits.
		t.Fatalf("claim after prepare: %+v %v", c, err)
	}
	if v, err := p.Verify(ctx, nil); err != nil || !v.OK() {
		t.Fatalf("verify: %v %v", err, v.Problems)
	}
}

// TestColdOpenReadsOnlyTheRootRecords checks that opening a root lists nothing and reads a
// fixed number of files, however many rows it holds, and that sessions cost no I/O.
func TestColdOpenReadsOnlyTheRootRecords(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{})
	for range 200 {
		ledgertest.MustAdmit(t, l, newDelivery(time.Time{}))
	}
	l.Close()
	fsys := faultfs.New(localfs.OSFS{}, nil)
	l, err := localfs.Open(ctx, dir, localfs.Config{Limits: testLimits(), FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := fsys.Counter().Snapshot()
	if c.Listings != 0 || c.ByOp[faultfs.OpReadFile] > 2 || c.Mutating > 3 {
		t.Fatalf("cold open: %v", c)
	}
	t.Logf("cold open: %v", c)
	fsys.Counter().Reset()
	for range 100 {
		s := l.Session()
		s.Close()
	}
	if c := fsys.Counter().Snapshot(); c.Total != 0 {
		t.Fatalf("sessions made I/O: %v", c)
	}
	s := l.Session()
	d := newDelivery(time.Time{})
	ledgertest.MustAdmit(t, s, d)
	s.Close()
	if _, err := l.Inspect(ctx, d.Key()); err != nil {
		t.Fatalf("closing a session closed the root: %v", err)
	}
}

// TestLockWaitsAreBounded checks that a held row-shard lock turns an admission into that
// shard into ErrBusy within the configured wait instead of a hang, and that no lock outside the
// key's own shard stands in an admission's way: not the admission lock, not other shards.
func TestLockWaitsAreBounded(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	l := openRoot(t, dir, localfs.Config{LockWait: 50 * time.Millisecond})
	defer l.Close()
	d := deliveryInShard(0x42)
	release, err := localfs.HoldRowLockForTest(ctx, dir, d.Key())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, err = l.Admit(ctx, d)
	if !errors.Is(err, ledger.ErrBusy) {
		t.Fatalf("admit with the key's shard lock held elsewhere: %v", err)
	}
	release()
	// Every lock but the key's own shard's held elsewhere: the admission goes through.
	var held []func()
	defer func() {
		for _, r := range held {
			r()
		}
	}()
	for _, name := range []string{localfs.AdmissionLock, localfs.MaintenanceLock, localfs.ClockLock} {
		r, err := localfs.HoldLockForTest(ctx, dir, name)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	for s := range 256 {
		if s == 0x42 {
			continue
		}
		r, err := localfs.HoldLockForTest(ctx, dir, fmt.Sprintf(".amiss-row-%02x.lock", s))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	ledgertest.MustAdmit(t, l, d)
	if a, err := l.Admit(ctx, d); err != nil || a.Outcome != ledger.Pending {
		t.Fatalf("re-admission: %+v %v", a, err)
	}
	ledgertest.MustComplete(t, l, ledgertest.MustSave(t, l, *ledgertest.MustClaim(t, l, d, ledger.Execute).Lease, "r"))
}

// TestCloseWaitsForOperationsInFlight: a handle is closed while one of its operations holds a
// row lock and has decided (a claim about to write Execute); a second handle on the root in the
// same process then claims the same row. The close must not drop the lock under the running
// operation: exactly one of the two claims may be granted, and nothing starts on the closed
// handle afterwards.
func TestCloseWaitsForOperationsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "root")
	clock := ledger.NewManualClock(epoch)
	d := newDelivery(time.Time{})
	// Hold the claim's state write in flight: it has read the row and decided.
	fsys := &holdingFS{match: d.Key().String() + ".state", arrived: make(chan struct{}), release: make(chan struct{})}
	first := openRoot(t, dir, localfs.Config{Clock: clock, FS: fsys, LockWait: time.Minute})
	ledgertest.MustAdmit(t, first, d)
	fsys.armed.Store(true)
	arrived, release := fsys.arrived, fsys.release
	type claimed struct {
		c   ledger.Claim
		err error
	}
	firstDone := make(chan claimed, 1)
	go func() {
		c, err := first.Claim(ctx, d.Key(), d.Binding.Digest(), "first", time.Minute)
		firstDone <- claimed{c, err}
	}()
	<-arrived
	closed := make(chan error, 1)
	go func() { closed <- first.Close() }()
	// A close that does not wait returns at once; give it the time to, so that the second
	// handle opens after it (a close that waits is still waiting: both orders are safe then).
	var closeErr error
	closeReturned := false
	select {
	case closeErr = <-closed:
		closeReturned = true
	case <-time.After(3 * time.Second):
	}

	second := openRoot(t, dir, localfs.Config{Clock: clock, LockWait: time.Minute})
	defer second.Close()
	secondDone := make(chan claimed, 1)
	go func() {
		c, err := second.Claim(ctx, d.Key(), d.Binding.Digest(), "second", time.Minute)
		secondDone <- claimed{c, err}
	}()
	// Likewise, a claim that is not kept out by the running one finishes at once.
	var b claimed
	secondReturned := false
	select {
	case b = <-secondDone:
		secondReturned = true
	case <-time.After(3 * time.Second):
	}
	close(release)
	a := <-firstDone
	if !secondReturned {
		b = <-secondDone
	}
	if !closeReturned {
		closeErr = <-closed
	}
	if closeErr != nil {
		t.Fatalf("close: %v", closeErr)
	}
	if a.err != nil || b.err != nil {
		t.Fatalf("claims: %v, %v", a.err, b.err)
	}
	if a.c.Outcome == ledger.Execute && b.c.Outcome == ledger.Execute {
		t.Fatalf("two Execute grants, fences %d and %d: the close dropped the row lock under a running claim",
			a.c.Lease.Fence, b.c.Lease.Fence)
	}
	if a.c.Outcome != ledger.Execute || b.c.Outcome != ledger.Busy {
		t.Fatalf("claims answered %v and %v, want execute then busy", a.c.Outcome, b.c.Outcome)
	}
	if _, err := first.Inspect(ctx, d.Key()); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("an operation on a closed handle: %v, want ErrUnavailable", err)
	}
	if _, err := first.Session().Claim(ctx, d.Key(), d.Binding.Digest(), "late", time.Minute); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("a claim through a session of a closed handle: %v, want ErrUnavailable", err)
	}
}

// holdingFS holds the first rename onto a path ending in match, once armed, until release.
type holdingFS struct {
	localfs.OSFS
	match            string
	armed            atomic.Bool
	once             sync.Once
	arrived, release chan struct{}
}

func (h *holdingFS) Rename(oldpath, newpath string) error {
	if h.armed.Load() && strings.HasSuffix(newpath, h.match) {
		h.once.Do(func() { close(h.arrived); <-h.release })
	}
	return h.OSFS.Rename(oldpath, newpath)
}
