// Package buildinfo says which build is running, for `amiss version` and the start-up line of
// every Lambda function: the version and commit the Makefile stamps into each binary it builds
// (make build, and sam build through the build-<Function> targets), or, for a binary built
// without them (go build, go run, go test), what the Go toolchain recorded: the module's
// version and the revision of the checkout it was built in.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped at build time by the Makefile:
//
//	-ldflags "-X github.com/amiss-ci/amiss/internal/buildinfo.version=$(git describe --always --dirty)
//	          -X github.com/amiss-ci/amiss/internal/buildinfo.commit=$(git rev-parse HEAD)"
var version, commit string

// Info is one build.
type Info struct {
	// Version is the stamped version (git describe), else the module's version, else
	// "(devel)".
	Version string
	// Commit is the full revision the binary was built from; empty when unknown.
	Commit string
	// Modified reports a build from a checkout with uncommitted changes, as far as the
	// toolchain knows (a stamped version says it too: "-dirty").
	Modified bool
	// Go is the toolchain's version.
	Go string
}

// Read returns the running build.
func Read() Info {
	return read(version, commit, debug.ReadBuildInfo)
}

func read(version, commit string, build func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: version, Commit: commit, Go: runtime.Version()}
	if bi, ok := build(); ok {
		if i.Version == "" && bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	return i
}

// String is the build as one line: "v1.2.0 commit 0123456789ab go1.26.8", the commit cut to
// twelve digits, "(modified)" after it for a build with uncommitted changes.
func (i Info) String() string {
	s := i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " commit " + c
		if i.Modified {
			s += " (modified)"
		}
	}
	return fmt.Sprintf("%s %s", s, i.Go)
}
