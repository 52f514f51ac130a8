// Package admlog is the append-only log through which the FileLedger's format 3 admits on
// local roots (localfs/logged.go, docs/design/file-ledger-format-3.md): a log whose answers
// can be trusted after any power loss.
//
// A log is one file, made whole at its full size before it is used, so that every later write
// overwrites bytes whose extent is durable and an fdatasync writes data only. Its first sector
// holds the header: the log's generation. Entries follow, each padded to whole sectors:
//
//	magic "AMLE" | generation | sequence | vouched | length | payload | CRC-32C
//
// (integers big-endian, 8 bytes each, the length 4). Sequences start at 1 in each generation.
// The header also holds a random salt, chosen at every Reset, that each entry's CRC covers
// first: the payloads carry bytes from outside (a webhook's subject), and without the salt
// such bytes, placed at a sector boundary, could pass for an entry in the search for damage
// beyond a torn one (and make a routine power loss look like damage).
//
// What the log promises:
//
//   - Append answers only once its entry is durable. Appends share their syncs: one leader
//     runs fdatasync for every entry written before that sync began (group commit), and each
//     caller is answered after a sync that covers its entry.
//   - Entries are written under one lock, at increasing offsets, so the log never has a hole
//     before an entry that was written.
//   - Any failure of a write or a sync poisons the log: that Append and every later one fail
//     (ErrPoisoned). Whether the failed entry reached the disk is unknown, so the caller must
//     stop using the log and treat it as a dead process's (replay decides).
//   - Read after a power loss returns the entries of the header's generation from the first
//     one up to the last one that is whole: every entry an Append answered is among them.
//     Beyond a torn entry it finds the end of the log, unless a later whole entry of the same
//     generation vouches for the torn one (its vouched field, the highest sequence durable
//     when it was written, is at least the torn one's): that entry's round had finished, so
//     the torn one was once durable and is damaged. Read then fails with ledger.ErrCorrupt.
//   - Reset starts a new generation (a checkpoint, once the caller made everything the entries
//     describe durable elsewhere): the old entries are no longer read. A generation must only
//     grow; the caller keeps the high-water (the log alone cannot, once it is removed).
package admlog

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs/vfs"
)

// Sector is the unit a disk writes atomically; the header is one, an entry whole ones.
const Sector = 512

const (
	headerMagic = "AMLH"
	entryMagic  = "AMLE"
	// entryHead is the fixed part of an entry before its payload; entryTrailer the CRC.
	entryHead    = 4 + 8 + 8 + 8 + 4
	entryTrailer = 4
	headerLen    = 4 + 8 + 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFull is answered by an Append whose entry does not fit in what is left of the log: the
// caller checkpoints (Reset) and tries again.
var ErrFull = errors.New("admlog: the log is full")

// ErrPoisoned is answered by every Append after a write or a sync of the log failed.
var ErrPoisoned = errors.New("admlog: the log failed and takes no more entries")

// Entry is one entry of a log.
type Entry struct {
	Seq     uint64
	Payload []byte
}

// Log is a log open for appending. It is safe for concurrent use.
type Log struct {
	f    vfs.File
	path string
	size int64

	mu      sync.Mutex
	cond    *sync.Cond
	gen     uint64
	salt    []byte
	off     int64  // where the next entry goes
	seq     uint64 // the last entry written
	durable uint64 // the last entry a finished sync covers
	syncing bool
	// waiting counts the appends that wrote their entry and are not answered yet: Reset
	// refuses to run under them.
	waiting int
	poison  error
}

// Create makes a log of size bytes at path, durable and whole, with generation gen and no
// entries: written to a temporary file beside path, synced, renamed into place, and the
// folder synced. It fails if path exists. The folder must be durable itself already.
func Create(fsys vfs.FS, path string, size int64, gen uint64) error {
	if size < 2*Sector || size%Sector != 0 {
		return fmt.Errorf("admlog: a log of %d bytes: want a multiple of %d, at least two", size, Sector)
	}
	if _, err := fsys.Stat(path); err == nil {
		return fmt.Errorf("admlog: create %s: %w", path, fs.ErrExist)
	}
	tmp := path + ".tmp"
	// A temporary file left by a crash of an earlier Create is never a log: start again.
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %v", ledger.ErrUnavailable, tmp, err)
	}
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ledger.ErrUnavailable, tmp, err)
	}
	salt, err := newSalt()
	if err != nil {
		f.Close()
		fsys.Remove(tmp)
		return err
	}
	data := make([]byte, size)
	copy(data, header(gen, salt))
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err == nil {
		err = fsys.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("%w: create %s: %v", ledger.ErrUnavailable, path, err)
	}
	return nil
}

// Open opens the log at path for appending, as generation gen, from its first entry on: it
// writes the header and makes it durable before it answers, so no entry of gen is written
// under an older header. gen must be above every generation the log was used with; one not
// above the header in place is refused.
func Open(fsys vfs.FS, path string, gen uint64) (*Log, error) {
	info, err := fsys.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ledger.ErrUnavailable, path, err)
	}
	if info.Size() < 2*Sector || info.Size()%Sector != 0 {
		return nil, fmt.Errorf("%w: %s is %d bytes: not a log", ledger.ErrCorrupt, path, info.Size())
	}
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ledger.ErrUnavailable, path, err)
	}
	l := &Log{f: f, path: path, size: info.Size()}
	l.cond = sync.NewCond(&l.mu)
	// The header in place, if it decodes: a failed Reset writes it back (see Reset), and gen
	// must be above it.
	if data, err := fsys.ReadFile(path); err == nil && len(data) >= headerLen {
		if old, salt, ok := decodeHeader(data[:headerLen]); ok {
			l.gen, l.salt = old, salt
		}
	}
	if err := l.Reset(gen); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// File is the log's open file (for its lock).
func (l *Log) File() vfs.File { return l.f }

// Close closes the log's file. It writes nothing.
func (l *Log) Close() error { return l.f.Close() }

// Generation is the generation the log appends in.
func (l *Log) Generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// Used is how many bytes the entries of this generation take, the header included.
func (l *Log) Used() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.off
}

// Size is the log's size.
func (l *Log) Size() int64 { return l.size }

// Reset starts generation gen with no entries: its header is written and made durable before
// Reset answers. The caller holds off every Append while it runs and, for a checkpoint, made
// durable first everything the old entries describe. A failure poisons the log.
func (l *Log) Reset(gen uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.poison != nil {
		return fmt.Errorf("%w: %s: %v", ErrPoisoned, l.path, l.poison)
	}
	if l.syncing || l.waiting > 0 || l.durable != l.seq {
		return fmt.Errorf("admlog: reset of %s while appends wait for their sync", l.path)
	}
	if gen <= l.gen {
		return fmt.Errorf("admlog: reset of %s to generation %d, not above %d", l.path, gen, l.gen)
	}
	salt, err := newSalt()
	if err != nil {
		return err
	}
	// A header that fails to reach the disk must not stay in the page cache either: a failed
	// write-back leaves the new bytes cached, marked clean, and a reader (cleanup, a replay)
	// would take the old generation's entries for retired while the disk still holds them
	// live. So the old header is written back over it before the log is poisoned.
	restore := func(cause error) {
		l.poison = cause
		if l.gen != 0 {
			l.f.WriteAt(header(l.gen, l.salt), 0)
		}
	}
	if _, err := l.f.WriteAt(header(gen, salt), 0); err != nil {
		restore(err)
		return fmt.Errorf("%w (%w): write the header of %s: %v", ErrPoisoned, ledger.ErrUnavailable, l.path, err)
	}
	if err := vfs.Datasync(l.f); err != nil {
		restore(err)
		return fmt.Errorf("%w (%w): sync the header of %s: %v", ErrPoisoned, ledger.ErrUnavailable, l.path, err)
	}
	l.gen, l.salt, l.off, l.seq, l.durable = gen, salt, Sector, 0, 0
	return nil
}

// Append writes payload as the next entry and answers its sequence once it is durable. An
// entry that could never fit, even in an empty log, is refused with ledger.ErrTooLarge; one
// that does not fit in what is left, with ErrFull. A failure (ErrPoisoned, also matching
// ledger.ErrUnavailable) leaves unknown whether the entry reached the disk.
func (l *Log) Append(payload []byte) (uint64, error) {
	if int64(len(payload)) > l.size-Sector-entryHead-entryTrailer || uint64(len(payload)) > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %s: an entry of %d bytes in a log of %d", ledger.ErrTooLarge, l.path, len(payload), l.size)
	}
	n := entrySize(len(payload))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.poison != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrPoisoned, l.path, l.poison)
	}
	if l.off+n > l.size {
		return 0, fmt.Errorf("%w: %s: an entry of %d bytes at %d of %d", ErrFull, l.path, n, l.off, l.size)
	}
	seq := l.seq + 1
	if _, err := l.f.WriteAt(encodeEntry(l.gen, l.salt, seq, l.durable, payload, n), l.off); err != nil {
		l.poison = err
		l.cond.Broadcast()
		return 0, fmt.Errorf("%w (%w): write entry %d of %s: %v", ErrPoisoned, ledger.ErrUnavailable, seq, l.path, err)
	}
	l.seq, l.off = seq, l.off+n
	l.waiting++
	defer func() { l.waiting-- }()
	for l.durable < seq && l.poison == nil {
		if l.syncing {
			l.cond.Wait()
			continue
		}
		// Lead a round: every entry written so far is covered by a sync started now.
		l.syncing = true
		upto := l.seq
		l.mu.Unlock()
		err := vfs.Datasync(l.f)
		l.mu.Lock()
		l.syncing = false
		if err != nil {
			l.poison = err
		} else {
			l.durable = max(l.durable, upto)
		}
		l.cond.Broadcast()
	}
	if l.durable >= seq {
		return seq, nil
	}
	return 0, fmt.Errorf("%w (%w): %s: entry %d: %v", ErrPoisoned, ledger.ErrUnavailable, l.path, seq, l.poison)
}

// Read reads a log's bytes: its generation and its whole entries (see the package
// documentation for where it ends, and when it fails with ledger.ErrCorrupt). The log must not
// be written while it is read (its owner is dead, or the reader holds it): see ReadLive.
func Read(data []byte) (gen uint64, entries []Entry, err error) {
	return read(data, true)
}

// ReadLive reads the bytes of a log that its owner may be writing while they are read: its
// generation and its entries up to the first that does not decode, with no search for damage
// beyond it. A read(2) is not atomic against concurrent writes, so it may see an entry being
// appended as it was before, and a later one whole (which vouches for it); or the header of a
// generation whose first entries the next one has already overwritten. Whatever it stops
// short of was appended after the read began, or was retired by a durable header.
func ReadLive(data []byte) (gen uint64, entries []Entry, err error) {
	return read(data, false)
}

func read(data []byte, damage bool) (gen uint64, entries []Entry, err error) {
	if len(data) < 2*Sector || len(data)%Sector != 0 {
		return 0, nil, fmt.Errorf("%w: a log of %d bytes", ledger.ErrCorrupt, len(data))
	}
	gen, salt, ok := decodeHeader(data[:headerLen])
	if !ok {
		return 0, nil, fmt.Errorf("%w: the log's header does not decode", ledger.ErrCorrupt)
	}
	off := Sector
	for {
		e, n, ok := decodeEntry(data, off, gen, salt)
		if !ok || e.Seq != uint64(len(entries))+1 {
			break
		}
		entries = append(entries, e)
		off += n
	}
	if !damage {
		return gen, entries, nil
	}
	// The log ends at off, unless a later whole entry vouches for the one expected there.
	next := uint64(len(entries)) + 1
	for p := off + Sector; p+entryHead+entryTrailer <= len(data); p += Sector {
		if _, _, vouched, ok := decodeEntryHead(data, p, gen, salt); ok && vouched >= next {
			return 0, nil, fmt.Errorf("%w: entry %d of generation %d does not decode, and the entry at offset %d, written after it was durable, says it was",
				ledger.ErrCorrupt, next, gen, p)
		}
	}
	return gen, entries, nil
}

// decodeHeader reads a header: its generation and salt, if it is whole.
func decodeHeader(h []byte) (gen uint64, salt []byte, ok bool) {
	if len(h) < headerLen || string(h[:4]) != headerMagic || binary.BigEndian.Uint32(h[20:]) != crc32.Checksum(h[:20], castagnoli) {
		return 0, nil, false
	}
	return binary.BigEndian.Uint64(h[4:]), slices.Clone(h[12:20]), true
}

func header(gen uint64, salt []byte) []byte {
	h := make([]byte, 0, headerLen)
	h = append(h, headerMagic...)
	h = binary.BigEndian.AppendUint64(h, gen)
	h = append(h, salt...)
	return binary.BigEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
}

func newSalt() ([]byte, error) {
	salt := make([]byte, 8)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("admlog: salt: %w", err)
	}
	return salt, nil
}

// entryCRC is the CRC-32C of the salt and then of b.
func entryCRC(salt, b []byte) uint32 {
	return crc32.Update(crc32.Checksum(salt, castagnoli), castagnoli, b)
}

// entrySize is the bytes an entry of a payload of n bytes takes: whole sectors.
func entrySize(n int) int64 {
	raw := int64(entryHead + n + entryTrailer)
	return (raw + Sector - 1) / Sector * Sector
}

func encodeEntry(gen uint64, salt []byte, seq, vouched uint64, payload []byte, size int64) []byte {
	b := make([]byte, 0, size)
	b = append(b, entryMagic...)
	b = binary.BigEndian.AppendUint64(b, gen)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, vouched)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	b = binary.BigEndian.AppendUint32(b, entryCRC(salt, b))
	return b[:size]
}

// decodeEntryHead decodes the whole entry at off and answers its sequence, its size and its
// vouched field, if it is whole and of generation gen.
func decodeEntryHead(data []byte, off int, gen uint64, salt []byte) (seq uint64, size int, vouched uint64, ok bool) {
	e, n, ok := decodeEntry(data, off, gen, salt)
	if !ok {
		return 0, 0, 0, false
	}
	return e.Seq, n, binary.BigEndian.Uint64(data[off+20:]), true
}

func decodeEntry(data []byte, off int, gen uint64, salt []byte) (Entry, int, bool) {
	if off+entryHead+entryTrailer > len(data) {
		return Entry{}, 0, false
	}
	b := data[off:]
	if string(b[:4]) != entryMagic || binary.BigEndian.Uint64(b[4:]) != gen {
		return Entry{}, 0, false
	}
	n := int(binary.BigEndian.Uint32(b[28:]))
	if n > len(b)-entryHead-entryTrailer {
		return Entry{}, 0, false
	}
	end := entryHead + n
	if binary.BigEndian.Uint32(b[end:]) != entryCRC(salt, b[:end]) {
		return Entry{}, 0, false
	}
	seq := binary.BigEndian.Uint64(b[12:])
	if seq == 0 {
		return Entry{}, 0, false
	}
	return Entry{Seq: seq, Payload: append([]byte(nil), b[entryHead:end]...)}, int(entrySize(n)), true
}
