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
