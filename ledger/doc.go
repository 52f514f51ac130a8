// Package ledger defines the delivery ledger contract that every amiss backend implements.
//
// A ledger holds one row per delivery key. The key is a digest of the route, the signature
// scheme and the replay identity, so two routes never collide. A row moves through
//
//	(absent) -> pending -> running -> saved -> done
//	                ^          |          \-> abandoned
//	                +----------+ (lease expired or released)
//
// and is forgotten by Cleanup only when it is done or abandoned, its replay retention has
// ended, and it is not permanent. A row's lifetime is fixed when it is written: permanent when
// nothing the signature proves says when the delivery stops being acceptable, or bounded by a
// signed time (a header the signature covers) or by a body time (a time the provider set inside
// the signed body), each with its ceiling recorded in the root's Limits.
//
// Beside the rows, a ledger keeps one subject record per commit status it publishes to
// (publisher, repository, commit, context: Subject and SubjectKey). SubjectRecord decides who
// may post next: the newest event's verdict is granted, an older one is superseded, a post
// whose outcome is unknown is read back before another is granted, and the report of a post
// hands the subject over to the verdict parked waiting for it. A subject record is forgotten
// once no verdict can land on it any more.
//
// A ledger also keeps small named state records for the controller's own bookkeeping (a
// catch-up cursor per webhook: StateStore), each written only on the version read.
//
// The package holds no I/O. Besides the types and the Ledger interface, it holds the state
// machines themselves (Row and SubjectRecord, with their transition methods), so that every
// backend makes the same decisions, and the procedure around each single-record decision
// (Records: validation, the decision, how its result must be written), run over a backend's
// Store, so that every backend differs only in how it makes a read-modify-write of one record
// atomic and durable (Write says how durable, in words every backend means the same thing by).
// What every backend computes alike about its records is here too: the end-time index's names
// (EndIndexName), the records' checksum (Checksum), the check of a row or subject record read
// back (StoredRow.Check, SubjectRecord.CheckStored), a capacity shard's quota
// (Limits.ShardQuota), and the one rule for forgetting a subject record
// (SubjectRecord.Forgettable). docs/ledger.md says what stays per backend and why.
//
// Every decision uses the ledger's effective now: the largest of the injected Clock, the row's
// own last transition and the high-water the backend persists. A clock that steps back
// therefore never revives an expired lease, never makes an ended row look alive and never
// turns a request refused as Stale into an accepted one.
package ledger
