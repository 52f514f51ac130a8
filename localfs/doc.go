// Package localfs is the FileLedger: the ledger contract over ordinary files in one root
// folder, on local disk or on EFS (NFSv4.1), with advisory locks and atomic replacement.
//
// Layout of a root (format 2):
//
//	.amiss-root.state          format version, limits, creation time, high-water clock, last batch
//	.amiss-cleanup.batch       only while a cleanup batch is being removed
//	.amiss-maintenance.state   where the next sweep lap and debris collection start (advisory)
//	.amiss-room.epoch          changes before any capacity shard gains room (advisory)
//	.amiss-maintenance.lock    .amiss-admission.lock   .amiss-clock.lock
//	.amiss-row-XX.lock         at most 256, one per first key byte, created lazily
//	rows/XX/capacity.state     capacity shard XX: slots used (never understated), pending keys
//	rows/XX/<key>.state        one bounded state file per row, its saved report inline
//	ended/<hour>/<end>-<key>   index of finished rows with a retention end, by end time
//
// Every file is a checksummed frame with a format version, written by atomic replacement
// (temporary file, sync of its data, rename; then a sync of the folder where an answer depends
// on the rename). Locks are taken in one order (maintenance, admission, row shards ascending,
// clock) with bounded waits. A row shard's lock guards its rows and its capacity shard, so an
// admission takes one lock; only when its home shard is full does it look at the others.
//
// Opening and preparing: Open lists nothing and reads one file, the root state (a root of
// format 1 is migrated first), so it fits every Lambda cold start. Prepare also checks every capacity shard, finishes an interrupted cleanup batch
// and collects debris, within a bounded budget: a long-running process (amiss serve, the
// cleanup function) prepares once, then hands each worker a Session, which shares the root's
// locks and settings and does no I/O to be made. Closing a session leaves the root open;
// closing the handle that opened the root waits for every operation on it and its sessions.
package localfs
