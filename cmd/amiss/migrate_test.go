package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/localfs"
)

// copyRoot copies the fixture root of a released format into a new folder.
func copyRoot(t *testing.T, fixture string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "root")
	err := filepath.WalkDir(fixture, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fixture, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// treeDigest sums every file's path and bytes under dir.
func treeDigest(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			io.WriteString(h, p+"\x00")
			h.Write(b)
		}
		return err
	})
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// The ledger commands that do not say they migrate leave a root of an older format as it is:
// each refuses it, naming amiss ledger migrate, and no byte of the root changes. amiss ledger
// migrate migrates it and says so; the commands then work, and a second migrate has nothing
// to do.
func TestOnlyMigrateChangesARootOfAnOlderFormat(t *testing.T) {
	ctx := context.Background()
	root := copyRoot(t, "../../localfs/testdata/format-v2")
	if v, err := wiring.FileRootFormat(root); err != nil || v != 2 {
		t.Fatalf("fixture of format %d (%v), want 2", v, err)
	}
	before := treeDigest(t, root)
	key := strings.Repeat("ab", 32)
	for _, args := range [][]string{{"stats"}, {"list"}, {"inspect", key}, {"verify"}, {"cleanup"}, {"republish", key},
		{"republish", "-abandoned"}} {
		full := append([]string{"ledger", args[0], "-root", root}, args[1:]...)
		var out, errOut bytes.Buffer
		err := run(ctx, full, &out, &errOut)
		if !errors.Is(err, wiring.ErrOlderFormat) || !strings.Contains(err.Error(), "is a format 2 root") ||
			!strings.Contains(err.Error(), "amiss ledger migrate -root "+root) {
			t.Errorf("amiss %s: %v, want a refusal naming amiss ledger migrate", strings.Join(full, " "), err)
		}
	}
	if treeDigest(t, root) != before {
		t.Fatal("a command that does not migrate changed the root")
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"ledger", "migrate", "-root", root}, &out, io.Discard); err != nil ||
		out.String() != "migrated "+root+" from format 2 to format "+strconv.Itoa(localfs.FormatVersion)+"\n" {
		t.Fatalf("migrate: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "stats", "-root", root}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "rows ") {
		t.Fatalf("stats after the migration: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "migrate", "-root", root}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "nothing to migrate") {
		t.Fatalf("a second migrate: %v %q", err, out.String())
	}
}
