package main

import (
	"errors"
	"strings"
	"testing"
)

// amiss serve refuses, with the flag named, settings under which it would admit deliveries it
// never evaluates (-workers 0: no runner; 202 for every webhook, nothing ever published) or a
// lease too short for any evaluation to hold (-lease 2ns).
func TestServeRefusesSettingsItCannotRunWith(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"-workers", "0"}, "-workers"},
		{[]string{"-workers", "-2"}, "-workers"},
		{[]string{"-workers", "100000"}, "-workers"},
		{[]string{"-lease", "2ns"}, "-lease"},
		{[]string{"-lease", "999ms"}, "-lease"},
	} {
		_, err := parseServe(c.args)
		if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("amiss serve %s: %v, want a usage error naming %s", strings.Join(c.args, " "), err, c.flag)
		}
	}
	if _, err := parseServe([]string{"-workers", "1", "-lease", "1s"}); err != nil {
		t.Errorf("amiss serve -workers 1 -lease 1s: %v", err)
	}
}
