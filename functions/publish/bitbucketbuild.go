package publish

import (
	"context"
	"net/http"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// What Bitbucket Cloud and Bitbucket Data Center share of a build status: its body (key,
// state, name, url, description, with the states SUCCESSFUL and FAILED) and that each keeps one
// status a key and commit, read back with one GET (404: none).

// buildStatus is the build status posted for s under key, linking target.
func buildStatus(s Status, key, target string) map[string]string {
	state := "FAILED"
	if s.State == "success" {
		state = "SUCCESSFUL"
	}
	return map[string]string{"key": key, "state": state, "name": s.Context, "url": target,
		"description": cutRunes(s.Description, otherDescription)}
}

// buildStanding reads with do the build status the GET of path answers (404: none) and says
// whether it is want: its state, description and URL.
func buildStanding(ctx context.Context, do func(context.Context, providerapi.Request) (*providerapi.Answer, error), path string,
	want map[string]string) (Standing, error) {
	a, err := do(ctx, providerapi.Request{Method: http.MethodGet, URL: path})
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
	if err := a.Decode("the commit's build status", &st); err != nil {
		return 0, err
	}
	return standingOf(true, st.State == want["state"] && st.Description == want["description"] && st.URL == want["url"]), nil
}
