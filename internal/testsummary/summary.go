// Package main reads `go test -json` on its input and prints what a person running the
// whole suite needs: one line per package as it finishes, the full output of every failed
// test, then a one-screen summary (packages, tests passed, skipped with their reasons,
// failed) ending with the line "tests: N passed, N failed, N skipped". The whole output of
// every test goes to -log. It exits 1 when a test or a build failed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of go test -json (test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string
}

type testState struct {
	output []string
	done   string // pass, fail, skip
}

type pkgState struct {
	tests                   map[string]*testState
	order                   []string
	output                  []string // package-level output (build errors, TestMain)
	done                    string   // pass, fail, skip (no test files)
	elapsed                 float64
	passed, failed, skipped int
}

// summary accumulates the run.
type summary struct {
	pkgs    map[string]*pkgState
	order   []string
	builds  []string // build failures' output
	out     io.Writer
	started time.Time
}

func newSummary(out io.Writer) *summary {
	return &summary{pkgs: map[string]*pkgState{}, out: out, started: time.Now()}
}

func (s *summary) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{tests: map[string]*testState{}}
		s.pkgs[name] = p
		s.order = append(s.order, name)
	}
	return p
}

// add takes one event.
func (s *summary) add(e event) {
	if e.Action == "build-output" {
		s.builds = append(s.builds, e.Output)
		return
	}
	if e.Action == "build-fail" {
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.output = append(p.output, e.Output)
		case "pass", "fail", "skip":
			p.done, p.elapsed = e.Action, e.Elapsed
			s.finished(e.Package, p)
		}
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &testState{}
		p.tests[e.Test] = t
		p.order = append(p.order, e.Test)
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
	case "pass":
		t.done = "pass"
		p.passed++
	case "fail":
		t.done = "fail"
		p.failed++
	case "skip":
		t.done = "skip"
		p.skipped++
	}
}

// finished prints a package's line, and the output of its failed tests.
func (s *summary) finished(name string, p *pkgState) {
	switch {
	case p.done == "skip" || (p.done == "pass" && len(p.tests) == 0):
		fmt.Fprintf(s.out, "%-6s %s (no tests)\n", "none", name)
		return
	case p.done == "pass" && p.passed == 0 && p.skipped > 0:
		fmt.Fprintf(s.out, "%-6s %s: every test skipped (%d)\n", "SKIP", name, p.skipped)
		return
	case p.done == "pass":
		fmt.Fprintf(s.out, "%-6s %s: %d passed%s (%.1fs)\n", "ok", name, p.passed, skippedNote(p.skipped), p.elapsed)
		return
	}
	fmt.Fprintf(s.out, "%-6s %s: %d passed, %d failed%s (%.1fs)\n", "FAIL", name, p.passed, p.failed, skippedNote(p.skipped), p.elapsed)
	for _, tn := range p.order {
		if t := p.tests[tn]; t.done == "fail" && !hasFailedSubtest(p, tn) {
			fmt.Fprintf(s.out, "  --- %s\n", tn)
			for _, l := range t.output {
				fmt.Fprint(s.out, "  "+l)
			}
		}
	}
	if p.failed == 0 { // a panic, a timeout or a failing TestMain: the package's own output
		for _, l := range p.output {
			fmt.Fprint(s.out, "  "+l)
		}
	}
}

// hasFailedSubtest: the failure is printed with the deepest failed test only.
func hasFailedSubtest(p *pkgState, name string) bool {
	for tn, t := range p.tests {
		if t.done == "fail" && strings.HasPrefix(tn, name+"/") {
			return true
		}
	}
	return false
}

func skippedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d skipped", n)
}

// skipReason is the message a skipped test gave: its last output line before "--- SKIP".
func skipReason(t *testState) string {
	reason := ""
	for _, l := range t.output {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		if _, after, ok := strings.Cut(l, ".go:"); ok { // "file.go:12: message"
			if _, msg, ok := strings.Cut(after, ": "); ok {
				l = msg
			}
		}
		reason = l
	}
	if reason == "" {
		reason = "(no reason given)"
	}
	return reason
}

// report prints the summary and returns whether everything passed.
func (s *summary) report() bool {
	var passed, failed, skipped, pkgOK, pkgFail, pkgNone, pkgAllSkipped int
	reasons := map[string][]string{}
	for _, name := range s.order {
		p := s.pkgs[name]
		passed, failed, skipped = passed+p.passed, failed+p.failed, skipped+p.skipped
		switch {
		case p.done == "fail" || p.done == "":
			pkgFail++
		case p.done == "skip" || len(p.tests) == 0:
			pkgNone++
		case p.passed == 0 && p.skipped > 0:
			pkgAllSkipped++
		default:
			pkgOK++
		}
		for _, tn := range p.order {
			if t := p.tests[tn]; t.done == "skip" {
				r := skipReason(t)
				reasons[r] = append(reasons[r], shortPkg(name)+"."+tn)
			}
		}
	}
	if len(s.builds) > 0 {
		fmt.Fprintln(s.out, "\nbuild failures:")
		for _, l := range s.builds {
			fmt.Fprint(s.out, "  "+l)
		}
	}
	fmt.Fprintf(s.out, "\n== summary (%s)\n", time.Since(s.started).Round(time.Second))
	fmt.Fprintf(s.out, "packages: %d ok, %d failed, %d with every test skipped, %d without tests\n", pkgOK, pkgFail, pkgAllSkipped, pkgNone)
	if len(reasons) > 0 {
		fmt.Fprintln(s.out, "skipped, by reason:")
		var rs []string
		for r := range reasons {
			rs = append(rs, r)
		}
		sort.Strings(rs)
		for _, r := range rs {
			names := reasons[r]
			sort.Strings(names)
			shown := names
			if len(shown) > 4 {
				shown = append(shown[:4:4], fmt.Sprintf("and %d more", len(names)-4))
			}
			fmt.Fprintf(s.out, "  %d: %s\n     %s\n", len(names), r, strings.Join(shown, ", "))
		}
	}
	if failed > 0 || pkgFail > 0 {
		fmt.Fprintln(s.out, "failed:")
		for _, name := range s.order {
			p := s.pkgs[name]
			for _, tn := range p.order {
				if p.tests[tn].done == "fail" && !hasFailedSubtest(p, tn) {
					fmt.Fprintf(s.out, "  %s.%s\n", shortPkg(name), tn)
				}
			}
			if p.done == "fail" && p.failed == 0 {
				fmt.Fprintf(s.out, "  %s (the package failed outside its tests: see above)\n", shortPkg(name))
			}
		}
	}
	fmt.Fprintf(s.out, "tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return failed == 0 && pkgFail == 0 && len(s.builds) == 0
}

func shortPkg(p string) string {
	if i := strings.Index(p, "/amiss/"); i >= 0 {
		return p[i+len("/amiss/"):]
	}
	return p
}

func main() {
	logPath := flag.String("log", "", "write the whole output of every test here")
	flag.Parse()
	var log io.Writer = io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		defer f.Close()
		log = f
	}
	s := newSummary(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event (go vet or the toolchain speaking): show it as it is.
			fmt.Fprintf(os.Stdout, "%s\n", line)
			fmt.Fprintf(log, "%s\n", line)
			continue
		}
		if e.Output != "" {
			fmt.Fprint(log, e.Output)
		}
		s.add(e)
	}
	if !s.report() {
		os.Exit(1)
	}
}
