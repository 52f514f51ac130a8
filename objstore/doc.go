// Package objstore is the S3 ledger: the ledger contract over one bucket and prefix, with
// conditional writes (If-None-Match: * to create, If-Match on the ETag read to change) as the
// only coordination. It works with AWS S3 and with S3-compatible stores that honour
// conditional PUTs (MinIO from RELEASE.2025-09-07T16-13-09Z), in a versioned bucket.
//
// Layout under the prefix:
//
//	root.json              limits (the body-age ceiling, and when an older root adopted
//	                       it), shard count, creation time, high-water clock
//	capacity/NN.json       capacity shards: quota, slots used, pending admissions, last batch
//	rows/<key>.json        one object per row: the row, and its report while it may be
//	                       published; or the reservation of its key, before the row exists
//	                       or, void, after an admission ended without one
//	due/<time>-r<key>      cleanup's first look at a key, written by its admission
//	due/<time>-p<id>       parts of cleanup's own schedule of looks (cleanup.go)
//	ended/<end>-<key>      end-time index entries of rows finished by format 5
//	subjects/<key>.json    subject records (subjects.go)
//	maintenance.json       the fenced maintenance lease (one cleanup at a time)
//	batch.json             the last cleanup batch
//	state/<name>.json      named state records (ledger.StateStore: a catch-up cursor),
//	                       written on the ETag read (state.go)
//	sweep.json             the safety net's lap
//
// Every object carries a format version, a CRC-32C of its data and a unique write token, so a
// write whose answer was lost is recognised as one's own when read back.
//
// Clock: the store's. Every answer carries a Date; every decision (lease liveness, freshness,
// retention, the high-water) uses the store's time estimated from the latest Date, raised by
// the persisted high-water and the row's own times. Hosts' clocks decide nothing. The
// resolution is one second: a lease may be honoured up to a second (plus one answer's transit)
// past its end, so lease windows are tens of seconds. The store is many nodes whose clocks may
// disagree: no decision that a request held in flight can never land rests on comparing two
// readings of the store's clock, except that a row's key is emptied only RequestLife after its
// reservation (see Config.RequestLife for what that assumes).
//
// Deletion names the exact version it judged: cleanup deletes a removable row's older versions,
// then the judged version by its version id, never by key. A write that landed after the
// judgement is a newer version and survives any late DELETE. The bucket must keep versions
// (checked at every start and every cleanup pass); a lifecycle rule expires the noncurrent
// ones. Nothing is forgotten while a write to it can still land (a row's key: keyAged; a subject
// record: ledger.SubjectRecord.Forgettable, given RequestLife). A cleanup pass
// reads what is due, through an index by time, never every kept object.
//
// Capacity is exact: an admission writes a reservation at its key, takes a slot naming that
// reservation, and creates the row only over the reservation (If-Match). Recounting an entry
// whose admission is over voids the reservation first, and the void stays at the key until a
// later admission takes it over, so a row write held in flight can never land once its slot
// was given back, however late it lands and whatever the clocks say.
//
// The single-record operations (Claim, Renew, Save, Complete, Abandon, Supersede, Revive,
// Release, Unclaim, Report, Inspect and the subject operations) are ledger.Records', written
// once for every backend and embedded in Ledger; this package provides their storage
// (ledger.Store, recordStore in rows.go and subjects.go): a fresh read, and one decision run as
// an optimistic transaction (decided on this handle's cached copy of its own last write first,
// answered only after a successful conditional write, decided again on a fresh read otherwise),
// every ledger.Write that changes a record being one conditional write. A row or subject
// record read back is checked, past its envelope, by the one check every backend makes of a
// record as stored (ledger.StoredRow.Check, ledger.SubjectRecord.CheckStored: consistent,
// stored under its own key, within the ceilings, holding the report its digest names or
// none). Admission, capacity, cleanup and the listings stay here because they rest on what only
// an object store gives and lacks: no lock, a request that can land late, versions a DELETE can
// name (docs/ledger.md).
//
// Some unexported names are defined by localfs too, meaning the same thing in its format: the
// record kinds (kindRoot, kindRow, kindBatch, kindShard, kindSweep, kindSubject, kindState: an
// envelope's kind here), the readers and writers of each kind (readRoot, readShard, writeShard,
// readBatch, readSweep, writeSweep, readSubject, namedState, batchEntry,
// indexEntry), the capacity recount (recount, recountShard, release, maxPending), cleanup's
// steps (listEnded, applyBatch, removeRow, countSubjects) and the handle's setup and admission
// (create, defaults, highWater, admitNew).
package objstore
