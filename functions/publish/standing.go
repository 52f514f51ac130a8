package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"unicode/utf8"
)

// Reading back what stands. Each provider keeps the statuses of a commit per context; the
// latest one under a context is what a user sees. Standing reads it and compares it with the
// status as Publish would have posted it (the same state as the provider names it, the same
// cut description, the same target URL).

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

// decodeAnswer reads a provider's JSON answer into v; an answer that does not decode (cut at
// the client's read limit, or not the provider's) leaves what stands unknown: a transient
// failure.
func decodeAnswer(what string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Class: Transient, Err: fmt.Errorf("%s does not decode: %v", what, err)}
	}
	return nil
}

// combinedStatus is GitHub's and Gitea's combined status of a ref: the latest status of each
// context (GitHub names the state "state", Gitea "status").
type combinedStatus struct {
	TotalCount int `json:"total_count"`
	Statuses   []struct {
		Context     string  `json:"context"`
		State       string  `json:"state"`
		Status      string  `json:"status"`
		Description *string `json:"description"`
		TargetURL   *string `json:"target_url"`
	} `json:"statuses"`
}

// readCombined pages through a combined status (perPage contexts a page, each read by get)
// for the context of s, and compares its latest status with s, the description cut to cut
// characters. It stops at the page that holds the context, a page short of perPage, or the
// provider's total count.
func readCombined(ctx context.Context, get func(ctx context.Context, url string) ([]byte, error), pageURL func(page int) string, s Status, cut, perPage int) (Standing, error) {
	seen := 0
	for page := 1; page <= readPages; page++ {
		body, err := get(ctx, pageURL(page))
		if err != nil {
			return 0, err
		}
		var c combinedStatus
		if err := decodeAnswer(fmt.Sprintf("page %d of the combined status", page), body, &c); err != nil {
			return 0, err
		}
		for _, st := range c.Statuses {
			if st.Context != s.Context {
				continue
			}
			state := st.State
			if state == "" {
				state = st.Status
			}
			return standingOf(true, state == s.State && deref(st.Description) == cutRunes(s.Description, cut) &&
				deref(st.TargetURL) == s.TargetURL), nil
		}
		seen += len(c.Statuses)
		if len(c.Statuses) < perPage || (c.TotalCount > 0 && seen >= c.TotalCount) {
			return StandingNone, nil // the last page
		}
	}
	return 0, &Error{Class: Transient, Err: fmt.Errorf("the combined status lists over %d pages of contexts without %q", readPages, s.Context)}
}

// Standing implements Publisher: GET {base}/repos/{owner}/{repo}/commits/{sha}/status, the
// combined status, which holds the latest status of each context.
func (g *GitHub) Standing(ctx context.Context, s Status) (Standing, error) {
	owner, repo, err := splitRepo(s.Repository)
	if err != nil {
		return 0, err
	}
	get := func(ctx context.Context, url string) ([]byte, error) {
		_, body, err := g.auth.send(ctx, &g.client, s.Installation, http.MethodGet, url, nil)
		return body, err
	}
	return readCombined(ctx, get, func(page int) string {
		return fmt.Sprintf("%s/repos/%s/%s/commits/%s/status?per_page=100&page=%d", g.BaseURL, url.PathEscape(owner),
			url.PathEscape(repo), url.PathEscape(s.SHA), page)
	}, s, githubDescription, 100)
}

// Standing implements Publisher: GET {base}/api/v1/repos/{owner}/{repo}/commits/{sha}/status.
func (g *Gitea) Standing(ctx context.Context, s Status) (Standing, error) {
	owner, repo, err := splitRepo(s.Repository)
	if err != nil {
		return 0, err
	}
	get := func(ctx context.Context, url string) ([]byte, error) {
		_, body, err := g.do(ctx, jsonRequest(http.MethodGet, url, nil, map[string]string{"Authorization": "token " + g.Token}))
		return body, err
	}
	return readCombined(ctx, get, func(page int) string {
		return fmt.Sprintf("%s/api/v1/repos/%s/%s/commits/%s/status?limit=50&page=%d", g.BaseURL, url.PathEscape(owner),
			url.PathEscape(repo), url.PathEscape(s.SHA), page)
	}, s, otherDescription, 50)
}

// The GitLab read-back reads the commit's statuses under the context's name 20 at a time
// (each carries its author; 20 at GitLab's field limits, 255-character descriptions and target
// URLs with escapes, stay within the 64 KiB the client reads of an answer), until an empty page.
// GitLab lists them oldest first; the one with the highest id is the latest.
const gitlabReadBackPerPage = 20

// Standing implements Publisher: GET {base}/api/v4/projects/{path}/repository/commits/{sha}/statuses?name=...
func (g *GitLab) Standing(ctx context.Context, s Status) (Standing, error) {
	project := url.PathEscape(s.Repository)
	var latest *gitlabStatus
	for page := 1; page <= readPages; page++ {
		_, list, err := g.do(ctx, jsonRequest(http.MethodGet, fmt.Sprintf("%s/api/v4/projects/%s/repository/commits/%s/statuses?name=%s&all=true&per_page=%d&page=%d",
			g.BaseURL, project, url.PathEscape(s.SHA), url.QueryEscape(s.Context), gitlabReadBackPerPage, page), nil, map[string]string{"PRIVATE-TOKEN": g.Token}))
		if err != nil {
			return 0, err
		}
		var statuses []gitlabStatus
		if err := decodeAnswer(fmt.Sprintf("page %d of the commit's statuses", page), list, &statuses); err != nil {
			return 0, err
		}
		if len(statuses) == 0 {
			break // past the last page (a short page is not the end: a server may cap per_page)
		}
		for i := range statuses {
			if st := &statuses[i]; st.Name == s.Context && (latest == nil || st.ID > latest.ID) {
				latest = st
			}
		}
	}
	if latest == nil {
		return StandingNone, nil
	}
	target := s.TargetURL
	if utf8.RuneCountInString(target) > GitLabMaxField {
		target = "" // left out when posted
	}
	return standingOf(true, latest.Status == gitlabState(s.State) && deref(latest.Description) == cutRunes(s.Description, GitLabMaxField) &&
		deref(latest.TargetURL) == target), nil
}

type gitlabStatus struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Status      string  `json:"status"`
	Description *string `json:"description"`
	TargetURL   *string `json:"target_url"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Standing implements Publisher: GET {base}/2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build/{key}.
// Bitbucket keeps one status per key, so it is the latest.
func (b *Bitbucket) Standing(ctx context.Context, s Status) (Standing, error) {
	ws, slug, sha, err := b.commit(ctx, s)
	if err != nil {
		return 0, err
	}
	_, body, err := b.do(ctx, jsonRequest(http.MethodGet, fmt.Sprintf("%s/2.0/repositories/%s/%s/commit/%s/statuses/build/%s", b.BaseURL,
		url.PathEscape(ws), url.PathEscape(slug), url.PathEscape(sha), url.PathEscape(BitbucketKey(s.Context))), nil, b.header()))
	if StatusOf(err) == http.StatusNotFound {
		return StandingNone, nil
	}
	if err != nil {
		return 0, err
	}
	var st struct {
		State       string `json:"state"`
		Description string `json:"description"`
		URL         string `json:"url"`
	}
	if err := decodeAnswer("the commit's build status", body, &st); err != nil {
		return 0, err
	}
	want := b.body(ws, slug, sha, s)
	return standingOf(true, st.State == want["state"] && st.Description == want["description"] && st.URL == want["url"]), nil
}
