package webhook

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Body times. A scheme whose signature covers only the body proves no time in a header, but
// the body itself may carry a time that the provider set at or after the event, which no
// sender chooses: signed with the body, it bounds the replay lifetime like a signed time. The
// research behind each rule, with its sources, is in docs/providers (GitHub, Gitea and
// Forgejo, Bitbucket). In short:
//
//	scheme            body shape                         field                                 format
//	github-sha256     a pull_request object               pull_request.updated_at, and          RFC 3339
//	                                                      pull_request.head.repo.pushed_at
//	                                                      (the later of the two)
//	github-sha256     a pusher and a repository           repository.pushed_at                  Unix seconds
//	                  (a push)                                                                  (RFC 3339 also read)
//	gitea, forgejo    action "opened" and a pull_request  pull_request.created_at               RFC 3339
//	bitbucket-sha256  eventKey and date at the top        date                                  ISO 8601, offset
//	                  (Data Center)                                                             without a colon
//
// Everything else carries none amiss trusts, and keeps a permanent marker: Gitea and Forgejo
// pushes (repository.updated_at is written after the payload is built), their other pull
// request actions (the payload is built before the pull request's time moves), Bitbucket Cloud
// (a push carries only commit dates; created and updated pull requests share one body shape
// and updated_on's behaviour on a source push is not documented), and every commit timestamp
// anywhere (whoever makes a commit sets its dates).
//
// The rule is a function of the scheme and the body bytes alone, never of a header: the event
// kind header (X-GitHub-Event, X-Event-Key) is not signed, and a rule chosen by it would let
// whoever replays a captured body relabel it until some field looked fresh, or until its
// marker became permanent, and have it evaluated again after its row was forgotten. However a
// body is labelled, every copy gets the same time, or none. A rule may only ever be added
// (turning a permanent kind into a bounded one); removing one would let a body forgotten
// under it be admitted again as new.

// bodyTime returns the provider-set time of a body signed under scheme and the field it was
// read from; the zero time when the body carries none amiss trusts (malformed JSON included:
// the change extraction refuses that body anyway).
func bodyTime(scheme string, body []byte) (time.Time, string) {
	switch scheme {
	case SchemeGitHub:
		return gitHubBodyTime(body)
	case SchemeGitea, SchemeForgejo:
		return giteaBodyTime(body)
	case SchemeBitbucket:
		return bitbucketBodyTime(body)
	}
	return time.Time{}, ""
}

type ghTimes struct {
	PullRequest *struct {
		UpdatedAt json.RawMessage `json:"updated_at"`
		Head      struct {
			Repo *struct {
				PushedAt json.RawMessage `json:"pushed_at"`
			} `json:"repo"`
		} `json:"head"`
	} `json:"pull_request"`
	Pusher     json.RawMessage `json:"pusher"`
	Repository *struct {
		PushedAt json.RawMessage `json:"pushed_at"`
	} `json:"repository"`
}

func gitHubBodyTime(body []byte) (time.Time, string) {
	var p ghTimes
	if json.Unmarshal(body, &p) != nil {
		return time.Time{}, ""
	}
	if pr := p.PullRequest; pr != nil {
		at, field := parseTime(pr.UpdatedAt), "pull_request.updated_at"
		if pr.Head.Repo != nil {
			if pushed := parseTime(pr.Head.Repo.PushedAt); pushed.After(at) {
				at, field = pushed, "pull_request.head.repo.pushed_at"
			}
		}
		if at.IsZero() {
			return time.Time{}, ""
		}
		return at, field
	}
	if !isNull(p.Pusher) && p.Repository != nil {
		if at := parseTime(p.Repository.PushedAt); !at.IsZero() {
			return at, "repository.pushed_at"
		}
	}
	return time.Time{}, ""
}

type giteaTimes struct {
	Action      string `json:"action"`
	PullRequest *struct {
		CreatedAt json.RawMessage `json:"created_at"`
	} `json:"pull_request"`
}

func giteaBodyTime(body []byte) (time.Time, string) {
	var p giteaTimes
	if json.Unmarshal(body, &p) != nil || p.Action != "opened" || p.PullRequest == nil {
		return time.Time{}, ""
	}
	if at := parseTime(p.PullRequest.CreatedAt); !at.IsZero() {
		return at, "pull_request.created_at"
	}
	return time.Time{}, ""
}

type bitbucketTimes struct {
	EventKey *string         `json:"eventKey"`
	Date     json.RawMessage `json:"date"`
}

func bitbucketBodyTime(body []byte) (time.Time, string) {
	var p bitbucketTimes
	if json.Unmarshal(body, &p) != nil || p.EventKey == nil || *p.EventKey == "" {
		return time.Time{}, ""
	}
	if at := parseTime(p.Date); !at.IsZero() {
		return at, "date"
	}
	return time.Time{}, ""
}

// maxUnixSeconds bounds a time given as Unix seconds (about the year 36800): anything larger
// is not a time a provider set.
const maxUnixSeconds = 1 << 40

// timeLayouts are the string forms a provider-set time takes: RFC 3339 (GitHub, Gitea,
// Forgejo) and ISO 8601 with an offset without a colon (Bitbucket Data Center).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999Z0700"}

// parseTime reads a JSON time: a string in one of timeLayouts, or an integer of Unix seconds
// (GitHub's push payloads). Anything else (absent, null, another type, out of range) is the
// zero time.
func parseTime(raw json.RawMessage) time.Time {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return time.Time{}
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return time.Time{}
		}
		for _, layout := range timeLayouts {
			if t, err := time.Parse(layout, s); err == nil && t.Unix() > 0 {
				return t.UTC()
			}
		}
		return time.Time{}
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n <= 0 || n > maxUnixSeconds {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}
