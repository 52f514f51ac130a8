package runner

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/ledger"
)

// Ties within the provider's time resolution. Two verdicts of one subject whose events carry
// the same time (GitHub's body times have whole seconds) are ordered by what the evaluation
// learnt of them (ledger.Tie), never by the order their webhooks were delivered in: what the
// payload proves (an edit names the title it changed from: it came after a verdict evaluated
// on that title; and an edit came after the opening of, or the push to, the head it carries),
// and what the provider showed when the verdict was evaluated (a verdict
// whose inputs were the pull request's then is newer than one whose inputs had already
// changed). The tie is frozen with the verdict, so every runner orders it alike.

// tieOf is the tie of a verdict evaluated on s, the provider having shown seen.
func tieOf(s change.Change, seen ledger.Seen) ledger.Tie {
	if s.Pull == nil {
		return ledger.Tie{}
	}
	t := ledger.Tie{Inputs: inputsDigest(s, s.Pull.Title, s.Pull.TargetBranch), Seen: seen, Starts: s.Pull.Starts}
	if w := s.Pull.Was; w != nil {
		t.From = inputsDigest(s, w.Title, w.TargetBranch)
	}
	return t
}

// inputsDigest names a pull request's inputs on s's commit: a SHA-256 of the parts, each
// framed by its length.
func inputsDigest(s change.Change, title, target string) ledger.Digest {
	h := sha256.New()
	for _, p := range []string{"amiss/tie/v1", s.Provider, s.Repository, s.SHA, title, target} {
		binary.Write(h, binary.BigEndian, uint64(len(p)))
		h.Write([]byte(p))
	}
	return ledger.Digest(h.Sum(nil))
}

// seen reads what the provider shows now of s's pull request, through the route's reader
// (Route.PullNow: the routes built from the configuration read with the route's reading
// credential), and answers whether it shows s's inputs. Without a reader, for a change that is
// no pull request, or when the read fails, it answers SeenNothing: the tie is then decided by
// the payload or by admission, and the evaluation is not failed for it.
//
// The read is compared with the pull request as it is when read, never as it was: a read made
// late calls current the verdict whose inputs the pull request has now (what changed them
// since is a later event, ordered by its own time), and one that shows neither of two
// verdicts' inputs freezes both stale, which orders nothing. A read served before the
// provider has applied the event's own write shows the pull request as it was before it, and
// may order the two verdicts of one second the wrong way round (docs/runner.md says when).
func (r *Runner) seen(ctx context.Context, log *slog.Logger, route *Route, s change.Change) ledger.Seen {
	if route.PullNow == nil || s.Pull == nil {
		return ledger.SeenNothing
	}
	now, err := route.PullNow(ctx, s)
	if err != nil {
		log.Info("the pull request could not be read at evaluation; a verdict of the same second is ordered without it", "err", err)
		return ledger.SeenNothing
	}
	shown := change.Change{Pull: &change.Pull{Title: now.Title}}
	shown.Bound() // the title cut as the change's is
	if shown.Pull.Title == s.Pull.Title && now.TargetBranch == s.Pull.TargetBranch {
		return ledger.SeenCurrent
	}
	return ledger.SeenStale
}
