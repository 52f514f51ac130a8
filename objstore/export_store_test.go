package objstore

import "github.com/amiss-ci/amiss/ledger"

// StoreForTest is the handle's ledger.Store: the single-record transactions ledger.Records
// runs its decisions in.
func StoreForTest(l *Ledger) ledger.Store { return recordStore{l} }
