// Package objstore will hold the S3 ledger: the ledger contract over one bucket and prefix
// with conditional writes as fences, passing ledger/ledgertest against MinIO. Nothing is
// implemented here yet.
package objstore
