// Package localfs is the FileLedger: the ledger contract over ordinary files in one root
// folder, on local disk or on EFS (NFSv4.1), with advisory locks and atomic replacement.
//
// Layout of a root (format 4):
//
//	.amiss-root.state          format version, limits, creation time, high-water clock, last batch
//	.amiss-cleanup.batch       only while a cleanup batch is being removed
//	.amiss-maintenance.state   where the next sweep lap and debris collection start (advisory)
//	.amiss-room.epoch          changes before any capacity shard gains room (advisory)
//	.amiss-maintenance.lock    .amiss-admission.lock   .amiss-clock.lock
//	.amiss-row-XX.lock         at most 256, one per first key byte, created lazily
//	rows/XX/capacity.state     capacity shard XX: slots used (never understated), pending keys
//	rows/XX/<key>.state        one bounded state file per row, its saved report inline
//	subjects/XX/<key>.state    one record per commit and status context published to
//	ended/<hour>/<end>-<key>   index of finished rows with a retention end, by end time
//
// Every file is a checksummed frame with a format version, written by atomic replacement
// (temporary file, sync of its data, rename; then a sync of the folder where an answer depends
// on the rename), except a capacity shard's record, rewritten in place (two copies, one write).
// Locks are taken in one order (maintenance, admission, row shards ascending, clock) with
// bounded waits. A row shard's lock guards its rows and its capacity shard, so an admission
// takes one lock; only when its home shard is full does it look at the others. A format 2 root
// is migrated when opened; one of the retired formats 1 and 3 is refused. A row or subject
// record read back is checked, past its frame, by the one check every backend makes of a record
// as stored (ledger.StoredRow.Check, ledger.SubjectRecord.CheckStored: consistent, filed under
// its own key, within the ceilings, holding the report its digest names or none); only a row's
// capacity shard number is checked here.
//
// Open reads one file, the root state, so it fits every Lambda cold start. A long-running
// process (amiss serve, the cleanup function) calls Prepare once (which also checks the
// capacity shards, finishes an interrupted cleanup batch and collects debris, within a budget)
// and then hands each worker a Session, which shares the root's locks and settings.
//
// The files, lowest layer first; each uses only the ones above it in this list:
//
//	fs.go              the file system (package vfs)
//	format.go          frames, format versions, strict JSON and the records of every file
//	syncer.go          group commit: shared syncs, one flush for a lone admission
//	filelock.go        a process's lock on a file: a semaphore and flock(2)
//	root.go            file names, Config, the state a root's handles share
//	durable.go         staged files, atomic replacement, durability classes
//	lock.go            the root's locks and the lock order
//	rootstate.go       the root state: limits, high-water clock, batch ids
//	rows.go            row files: read, write, reports
//	index.go           the end-time index
//	listing.go         laps over the row folders, cursors
//	capacity.go        capacity shards: records, recounting, the room epoch
//	maintenance.go     the maintenance state and debris collection
//	subjects.go        subject records: their reads and writes (ledger.SubjectStore), their cleanup
//	cleanup.go         Cleanup: batches, releases, the sweep
//	admit.go           Admit: a new key's slot, borrowing, refusal
//	ops.go             a row's read and read-modify-write (ledger.RowStore), Rows, Stats
//	migrate.go         format 2 to format 4
//	verify.go          ReadLimits and Verify
//	ledger.go          Open, Prepare, Session, Close: creating and loading a root
//
// The single-record operations (Claim, Renew, Save, Complete, Abandon, Supersede, Revive,
// Release, Unclaim, Report, Inspect and the subject operations) are ledger.Records', written once
// for every backend and embedded in Ledger; this package provides their storage
// (ledger.Store): a record read, and one decision run under the record's row-shard lock and
// written with the durability its ledger.Write asks (ops.go says what each one syncs and why).
// Admission, capacity, cleanup and the listings stay here because they rest on what only a file
// system gives: one lock per shard held across several writes, in-place records, a folder
// listing, a file system sync (docs/ledger.md).
//
// Some unexported names are defined by objstore too, meaning the same thing in its format: the
// record kinds (kindRoot, kindRow, kindBatch, kindShard, kindSweep, kindSubject, kindState: a
// byte in a frame here), the readers and writers of each kind (readRoot, readShard, writeShard,
// readBatch, readSweep, writeSweep, readSubject, namedState, batchEntry,
// indexEntry), the capacity recount (recount, recountShard, release, maxPending), cleanup's
// steps (listEnded, applyBatch, removeRow, countSubjects) and the handle's setup and admission
// (create, defaults, highWater, admitNew).
//
// Test harnesses live in internal/faultfs (counting and injected failures) and
// internal/powerfs (a file system in memory that models what a power loss keeps).
package localfs
