package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// make help lists every target a user may type: each one .PHONY declares, less test-prepare
// (make test runs it) and the build-NAME targets sam build calls, which it lists as one line.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	phony := regexp.MustCompile(`(?m)^\.PHONY:((?:[^\n\\]*\\\n)*[^\n]*)`).FindSubmatch(data)
	if phony == nil {
		t.Fatal("the Makefile declares no .PHONY targets")
	}
	targets := strings.Fields(strings.ReplaceAll(string(phony[1]), "\\", " "))
	cmd := exec.Command("make", "-s", "--no-print-directory", "help")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") {
			listed[f[0]] = true
		}
	}
	for _, target := range targets {
		name := target
		switch {
		case target == "test-prepare":
			continue
		case strings.HasPrefix(target, "build-"):
			name = "build-NAME"
		}
		if !listed[name] {
			t.Errorf("make help does not list %s:\n%s", name, out)
		}
	}
	if len(targets) < 20 {
		t.Errorf("read %d targets from .PHONY: %q", len(targets), targets)
	}
}

// make run, the README's first command, makes its own root the first time (amiss serve
// -create), for the example's configuration and for any other one; a ROOT the user names
// must exist, unless CREATE=yes, so that a mistyped one is refused rather than served empty.
func TestMakeRunCreatesOnlyItsOwnRoots(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	for _, c := range []struct {
		vars   []string
		root   string
		create bool
	}{
		{nil, "var/ledger", true},
		{[]string{"CONFIG=examples/github.yaml"}, "var/github", true},
		{[]string{"ROOT=var/mine"}, "var/mine", false},
		{[]string{"ROOT=var/mine", "CREATE=yes"}, "var/mine", true},
	} {
		cmd := exec.Command("make", append([]string{"-n", "--no-print-directory", "run"}, c.vars...)...)
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run %v: %v\n%s", c.vars, err, out)
		}
		var serve string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "./bin/amiss serve ") {
				serve = line
			}
		}
		if !strings.Contains(serve, " -root "+c.root+" ") || strings.HasSuffix(serve, " -create") != c.create {
			t.Errorf("make run %v runs %q: want -root %s, -create %v", c.vars, serve, c.root, c.create)
		}
	}
}
