// Package publish posts verdicts back to the providers: commit statuses on GitHub (and GitHub
// Enterprise), Gitea/Forgejo and GitLab, build statuses on Bitbucket Cloud and Bitbucket Data
// Center, check runs for a GitHub App, and a log publisher for local use.
//
// Each publisher speaks through its provider's client (functions/providerapi/...), which makes
// a few quick attempts within one call (transport errors, 5xx, rate limits and GitLab's busy
// 409, honouring a short wait the provider names) and then answers an *Error that classifies
// the provider's last answer, so that the runner can schedule the next attempt:
//
//   - Transient: the provider or the network failed; retry later (RetryAfter, when the provider
//     named a wait: Retry-After, or a rate limit's reset).
//   - Operator: 401, 403 or 404: a token, a scope or a repository name an operator must fix;
//     retry later, and say so loudly.
//   - Permanent: a refusal that can never succeed for this verdict (for example 422 for a commit
//     the provider does not know); errors.Is(err, ErrPermanent) holds.
//
// Unknown(err) says a post may have been applied although its answer never came; the runner
// reads back (Standing) before it posts again. Every publisher keeps one contract
// (publishtest.RunContract): created, refused, unknown outcome, read-back, rate limit and a
// read-back across pages. The table of answers for each provider is in docs/providers/*.md.
package publish

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// Status is one verdict to post: a commit status, or a check run. State is success, failure or
// error: never pending.
type Status struct {
	Repository  string
	SHA         string
	State       string
	Description string
	Context     string
	TargetURL   string
	// Installation is the GitHub App installation the delivery's webhook came from (0: none);
	// a publisher authenticating as the App posts with its token.
	Installation int64
	// ExternalID names the delivery (its ledger key): a check run carries it, and a publisher
	// finds its own check run again by it.
	ExternalID string
	// Files are the files the verdict's rules refused, for the publishers that can show them
	// on the file (a check run's annotations); the others leave them out. FilesLeftOut counts
	// those the frozen verdict had no room for.
	Files        []File
	FilesLeftOut int
}

// File is a file a rule refused: its path, the rule's short name, and why.
type File struct {
	Path    string
	Rule    string
	Message string
}

// Publisher posts statuses, and reads back what stands.
type Publisher interface {
	// Publish posts s. A failure is an *Error; Unknown(err) says whether the provider may have
	// applied the status all the same (a timeout, a cut connection, a gateway's 5xx).
	Publish(ctx context.Context, s Status) error
	// Standing reads back the latest status the provider holds for s's repository, commit and
	// context, and says whether it is s (as Publish would have posted it), another, or none.
	Standing(ctx context.Context, s Status) (Standing, error)
}

// Resolver is a publisher that names some commits by another hash than the one it posts to
// (Bitbucket Cloud's pull requests abbreviate them): Resolve returns s with the hash the
// status is posted against.
type Resolver interface {
	Resolve(ctx context.Context, s Status) (Status, error)
}

// Standing is what a read-back found.
type Standing int

// What a read-back can find.
const (
	// StandingNone: no status for the context.
	StandingNone Standing = iota + 1
	// StandingOurs: the latest status for the context is the one asked about.
	StandingOurs
	// StandingOther: the latest status for the context is another.
	StandingOther
)

func (s Standing) String() string {
	switch s {
	case StandingNone:
		return "none"
	case StandingOurs:
		return "ours"
	case StandingOther:
		return "other"
	}
	return fmt.Sprintf("Standing(%d)", int(s))
}

// The classes of failure are the provider clients' (functions/providerapi), so that a
// publication's failure and a read's are judged alike by the runner.
type (
	// Class says what a failed publication means for the verdict.
	Class = providerapi.Class
	// Error is a failed publication: the class of the provider's last answer, its HTTP status
	// (0 for a transport error), whether the provider may have applied the status all the
	// same, and the wait the provider asked for, if any.
	Error = providerapi.Error
)

// The classes of failure.
const (
	// Transient: the provider or the network failed; a later attempt may succeed.
	Transient = providerapi.Transient
	// Operator: the provider refused the credentials or cannot see the repository (401, 403,
	// 404); an operator fixes it, so it is retried on the long schedule and reported as an error.
	Operator = providerapi.Operator
	// Permanent: the provider refused this status for good.
	Permanent = providerapi.Permanent
)

// ErrPermanent: the provider refused the status for good; retrying cannot help.
var ErrPermanent = providerapi.ErrPermanent

// ClassOf classifies an error a publisher returned: its *Error's class, Permanent for an error
// wrapping ErrPermanent, and Transient for anything else (a cancelled context, an unknown
// failure).
func ClassOf(err error) Class { return providerapi.ClassOf(err) }

// RetryAfterOf returns the wait the provider asked for, or zero.
func RetryAfterOf(err error) time.Duration { return providerapi.RetryAfterOf(err) }

// Unknown reports whether a failed publication may have been applied all the same: a status
// the provider created although its answer never arrived. Such a publication is read back
// before it is posted again.
func Unknown(err error) bool { return providerapi.Unknown(err) }

// StatusOf returns the provider's HTTP status in err, or zero.
func StatusOf(err error) int { return providerapi.StatusOf(err) }

// Description limits by provider (GitHub documents 140 characters; GitLab 255; the others are
// kept to 255).
const (
	githubDescription = 140
	otherDescription  = 255
)

// cutRunes shortens s to n characters, marking the cut with an ellipsis.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// readPages bounds a read-back: a provider lists at most this many pages of a commit's
// statuses before the read-back gives up for now (a transient failure, tried again later).
const readPages = 50

func standingOf(found bool, ours bool) Standing {
	switch {
	case !found:
		return StandingNone
	case ours:
		return StandingOurs
	}
	return StandingOther
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Log prints verdicts instead of posting them: the local default. It never fails, and has
// nothing to read back (Standing answers StandingNone).
type Log struct{ Logger *slog.Logger }

// Standing implements Publisher: a log holds no status.
func (Log) Standing(context.Context, Status) (Standing, error) { return StandingNone, nil }

// Publish implements Publisher.
func (l Log) Publish(ctx context.Context, s Status) error {
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("verdict", "repository", s.Repository, "sha", s.SHA, "state", s.State, "context", s.Context,
		"description", s.Description, "target_url", s.TargetURL)
	return nil
}
