package objstore

import "github.com/amiss-ci/amiss/ledger"

// EncodeMaintenanceForTest encodes a maintenance lease object as another owner would write it.
func EncodeMaintenanceForTest(owner string, fence uint64, until int64) ([]byte, error) {
	return encode(kindMaintenance, "test-token", maintenanceData{Owner: owner, Fence: fence, Until: until})
}

// MaintenanceName and RowName are the object names the tests reach directly.
const MaintenanceName = maintenanceName

var RowName = rowName

// RequestLife is how long after it was signed a request can still land (the default).
const RequestLife = DefaultRequestLife

// RereadRootNextForTest makes the handle's next admission re-read the root, as it does once a
// minute.
func RereadRootNextForTest(l *Ledger) { l.hwRead.Store(-int64(hwRefresh)) }

// ReadingsApart is how far behind cleanup's reading of the store's time another handle's may be.
const ReadingsApart = readingsApart

// SubjectName is the object name of a subject record, without the prefix.
var SubjectName = subjectName

// EncodeSubjectForTest encodes rec as a subject record object, whatever it holds: the object a
// build that wrote such a record would leave.
func EncodeSubjectForTest(rec ledger.SubjectRecord) ([]byte, error) {
	return encode(kindSubject, "test-token", rec)
}

// RewriteRowForTest decodes a row object, lets change alter its row and report, and encodes
// it again, whatever they then hold: the object a build that wrote such a row would leave.
func RewriteRowForTest(body []byte, change func(row *ledger.Row, report *[]byte)) ([]byte, error) {
	var rd rowData
	if err := decode("row", kindRow, body, &rd); err != nil {
		return nil, err
	}
	change(&rd.Row, &rd.Report)
	return encode(kindRow, "test-token", rd)
}

// SetRowShardForTest rewrites a row object to say its slot is in capacity shard shard.
func SetRowShardForTest(body []byte, shard int) ([]byte, error) {
	var rd rowData
	if err := decode("row", kindRow, body, &rd); err != nil {
		return nil, err
	}
	rd.Shard = shard
	return encode(kindRow, "test-token", rd)
}
