package localfs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/localfs/internal/powerfs"
)

// Power cuts after a process died between making a folder (subjects, subjects/XX) and making
// its entry durable in its parent. The folder is then in the page cache only; a later process
// finds it there, and an answer it gives from a file in that folder (a grant to post, synced
// with its folder before it is answered) must not be lost with the folder's unsynced entry.

// folderDeath is a process that dies at its nth sync of a folder: it made the folder, or
// renamed a file into it, and never made that durable.
type folderDeath struct {
	*powerfs.FS
	n    int32
	seen atomic.Int32
}

func (f *folderDeath) SyncDir(name string) error {
	if f.seen.Add(1) >= f.n {
		return errProcessDied
	}
	return f.FS.SyncDir(name)
}

func (f *folderDeath) SyncFS(name string) error {
	if f.seen.Add(1) >= f.n {
		return errProcessDied
	}
	return f.FS.SyncFS(name)
}

// TestPowerCutAfterAProcessCrashKeepsAnAnsweredSubjectGrant: a process asking to post on a
// subject no record exists for dies at its first folder sync (after making subjects/, before
// its entry is durable in the root) or at its second (subjects/XX made and not durable in
// subjects/). A new process then grants the post (SubjectPost, "synced with its folder before it
// is answered"), and the power goes. After every way of recovering, the grant's record is
// there with the grant's fence: a grant lost here would let another verdict post without
// knowing that this one may land after it.
func TestPowerCutAfterAProcessCrashKeepsAnAnsweredSubjectGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, dieAt := range []int32{1, 2} {
		t.Run(fmt.Sprintf("the first process dies at folder sync %d", dieAt), func(t *testing.T) {
			clock := ledger.NewManualClock(epoch)
			fsys := newPoweredRoot(t, clock)
			subject := ledger.Subject{Publisher: "github https://api.github.com", Repository: "acme/app",
				SHA: fmt.Sprintf("%040d", dieAt), Context: "amiss/verdict"}
			q := ledger.SubjectRequest{Subject: subject, EvaluationID: "ev-1", HoldFor: 20 * time.Second, Settle: time.Minute,
				Order: ledger.Order{Key: newDelivery(time.Time{}).Key(), AdmittedAt: clock.Now()}}

			first := openOn(t, &folderDeath{FS: fsys, n: dieAt}, clock)
			if g, err := first.AcquireSubject(ctx, q); err == nil {
				t.Fatalf("the first process was answered %v although it died at a folder sync", g.Outcome)
			}
			first.Close()

			second := openPowered(t, fsys, clock, false)
			g, err := second.AcquireSubject(ctx, q)
			if err != nil || g.Outcome != ledger.SubjectPost {
				t.Fatalf("the new process's request: %+v %v, want a grant to post", g, err)
			}
			second.Close()
			fsys.Cut()

			eachReboot(t, fsys, clock, func(p powerfs.Persistence, l *localfs.Ledger) {
				rec, err := l.InspectSubject(ctx, subject.Key())
				if err != nil {
					t.Errorf("%s: a grant to post (fence %d) was answered, and after the power cut: %v", p, g.Fence, err)
					return
				}
				if rec.Fence < g.Fence {
					t.Errorf("%s: a grant to post under fence %d was answered, and after the power cut the record's fence is %d", p, g.Fence, rec.Fence)
				}
			})
		})
	}
}
