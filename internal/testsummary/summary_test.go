package main

import (
	"bytes"
	"strings"
	"testing"
)

func feed(s *summary, events ...event) {
	for _, e := range events {
		s.add(e)
	}
}

func TestSummary(t *testing.T) {
	var out bytes.Buffer
	s := newSummary(&out)
	a, b, c, d := "github.com/amiss-ci/amiss/a", "github.com/amiss-ci/amiss/b", "github.com/amiss-ci/amiss/c", "github.com/amiss-ci/amiss/d"
	feed(s,
		event{Action: "run", Package: a, Test: "TestOne"}, event{Action: "pass", Package: a, Test: "TestOne"},
		event{Action: "run", Package: a, Test: "TestTwo"}, event{Action: "pass", Package: a, Test: "TestTwo"},
		event{Action: "pass", Package: a, Elapsed: 1.5},
		event{Action: "run", Package: b, Test: "TestS3"},
		event{Action: "output", Package: b, Test: "TestS3", Output: "=== RUN   TestS3\n"},
		event{Action: "output", Package: b, Test: "TestS3", Output: "    s3_test.go:9: SKIPPED: MinIO not available; make minio-image\n"},
		event{Action: "output", Package: b, Test: "TestS3", Output: "--- SKIP: TestS3 (0.00s)\n"},
		event{Action: "skip", Package: b, Test: "TestS3"},
		event{Action: "pass", Package: b},
		event{Action: "run", Package: c, Test: "TestBad"},
		event{Action: "run", Package: c, Test: "TestBad/case"},
		event{Action: "output", Package: c, Test: "TestBad/case", Output: "    bad_test.go:3: got 1, want 2\n"},
		event{Action: "fail", Package: c, Test: "TestBad/case"},
		event{Action: "fail", Package: c, Test: "TestBad"},
		event{Action: "fail", Package: c},
		event{Action: "skip", Package: d},
	)
	if s.report() {
		t.Fatal("a failed run reported success")
	}
	got := out.String()
	for _, want := range []string{
		"ok     github.com/amiss-ci/amiss/a: 2 passed (1.5s)",
		"SKIP   github.com/amiss-ci/amiss/b: every test skipped (1)",
		"FAIL   github.com/amiss-ci/amiss/c: 0 passed, 2 failed",
		"  --- TestBad/case\n      bad_test.go:3: got 1, want 2",
		"none   github.com/amiss-ci/amiss/d (no tests)",
		"packages: 1 ok, 1 failed, 1 with every test skipped, 1 without tests",
		"  1: SKIPPED: MinIO not available; make minio-image\n     b.TestS3",
		"failed:\n  c.TestBad/case\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "tests: 2 passed, 2 failed, 1 skipped\n") {
		t.Errorf("the last line is not the count:\n%s", got)
	}

	out.Reset()
	s = newSummary(&out)
	feed(s, event{Action: "pass", Package: a, Test: "TestOne"}, event{Action: "pass", Package: a})
	if !s.report() || !strings.HasSuffix(out.String(), "tests: 1 passed, 0 failed, 0 skipped\n") {
		t.Fatalf("a passing run:\n%s", out.String())
	}
}
