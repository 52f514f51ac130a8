package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func recorded(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
	return func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings}, true
	}
}

// The Makefile's stamp wins over what the toolchain recorded; without a stamp, the recorded
// revision names the build; with neither, the build says it is a development one.
func TestTheStampedBuildWins(t *testing.T) {
	vcs := recorded(debug.BuildSetting{Key: "vcs.revision", Value: "1111111111111111111111111111111111111111"},
		debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	i := read("v1.4.0-3-gabcdef0-dirty", "abcdef0123456789abcdef0123456789abcdef01", vcs)
	if i.Version != "v1.4.0-3-gabcdef0-dirty" || i.Commit != "abcdef0123456789abcdef0123456789abcdef01" || !i.Modified {
		t.Fatalf("stamped: %+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "v1.4.0-3-gabcdef0-dirty commit abcdef012345 (modified) go1.") {
		t.Fatalf("line %q", s)
	}
	if i := read("", "", vcs); i.Version != "(devel)" || i.Commit != "1111111111111111111111111111111111111111" {
		t.Fatalf("recorded only: %+v", i)
	}
	i = read("", "", func() (*debug.BuildInfo, bool) { return nil, false })
	if i.Version != "(devel)" || i.Commit != "" || strings.Contains(i.String(), "commit") {
		t.Fatalf("nothing known: %+v %q", i, i.String())
	}
}
