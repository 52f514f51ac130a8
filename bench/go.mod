module github.com/amiss-ci/amiss/bench

go 1.26.8

require github.com/amiss-ci/amiss v0.0.0

require (
	github.com/mattn/go-sqlite3 v1.14.53
	golang.org/x/sys v0.50.0
)

replace github.com/amiss-ci/amiss => ../
