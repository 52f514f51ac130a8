package publish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
)

// GitHubChecks publishes each verdict as a GitHub check run (the checks API, which only a
// GitHub App can write), authenticated with the installation token of the verdict's webhook:
//
//	POST  {base}/repos/{owner}/{repo}/check-runs                       checks/create
//	PATCH {base}/repos/{owner}/{repo}/check-runs/{id}                  checks/update
//	GET   {base}/repos/{owner}/{repo}/commits/{sha}/check-runs         checks/list-for-ref
//
// One delivery, one check run: named by the route's context, on the head commit, completed,
// with a conclusion (Conclusion), a title and summary, details_url (the route's target URL,
// left out when there is none: GitHub then links the App's page), and external_id, the
// delivery's key. Before it creates anything, Publish lists the commit's check runs of that
// name (filter=all) and looks for its external_id: a create whose answer was lost (a timeout,
// a cut connection, a 5xx) is found there and updated in place, never created twice, as long
// as it is the latest check run of the name. When another was created after it (an older
// verdict's create that GitHub applied late, another App's check run of the name), an update
// would leave that one shown: Publish creates a new check run, which stands.
//
// Annotations: one per refused file (Status.Files), at level failure on line 1 of the file.
// GitHub takes at most 50 in one request and appends those of each update to the ones the
// check run holds, so the create carries the first 50 and each following update the next 50;
// a publication taken up again after a cut starts after the check run's annotations_count,
// so none is posted twice.
//
// Standing: the latest check run of the name on the commit is the one with the highest id
// (GitHub numbers check runs in the order it creates them; the listing's own order is not
// documented, and is not relied on). It is ours when its external_id is this delivery's key and
// it shows what Publish posts (completed, the conclusion, the title, the summary, every
// annotation, the details URL); another delivery's is other. Our check run showing less (an
// update that carried annotations was cut) reads as none: the publication is not finished, and
// Publish finishes it in place.
type GitHubChecks struct {
	*github.Client
	// Completed is the clock completed_at is read from (default time.Now).
	Completed func() time.Time
}

// NewGitHubChecks returns a check-run publisher authenticating as a GitHub App with tokens.
func NewGitHubChecks(baseURL string, tokens github.InstallationTokens, hc *http.Client) *GitHubChecks {
	return &GitHubChecks{Client: github.NewInstallationClient(baseURL, tokens, hc)}
}

// Bounds of a check run's output (checks/create and checks/update in GitHub's OpenAPI
// description): 50 annotations a request, a summary of 65,535 characters, an annotation title
// of 255 characters and a message of 64 KB (kept far below).
const (
	MaxAnnotationsPerRequest = 50
	MaxCheckSummary          = 65535
	maxAnnotationTitle       = 255
	maxAnnotationMessage     = 4096
	checkRunsPerPage         = 100
	// maxCheckRunsPage bounds one answer: a page of 100 check runs, each a few KB with its App
	// and check suite, runs to half a megabyte, far past the 64 KiB of a status. An answer cut
	// by it does not decode, and the publication is retried (transient).
	maxCheckRunsPage = 8 << 20
)

// Conclusion is the check run conclusion of a verdict's state: success is success, failure is
// failure, and error (the commit could not be evaluated) is failure too, with a title that
// says so. Not action_required, which GitHub shows as a call to act at details_url, which a
// route may not have; not neutral, which a required check counts as passing: a commit amiss
// could not evaluate must not pass.
func Conclusion(state string) string {
	if state == "success" {
		return "success"
	}
	return "failure"
}

// CheckTitle is the output title of a verdict's state: short, the description is the summary.
func CheckTitle(state string) string {
	switch state {
	case "success":
		return "All rules hold"
	case "failure":
		return "Rules failed"
	}
	return "Could not be evaluated"
}

// CheckSummary is the output summary of s: its description, and what its files are.
func CheckSummary(s Status) string {
	sum := s.Description
	if n := len(s.Files); n > 0 {
		sum += fmt.Sprintf("\n\n%d refused %s annotated on the files.", n, plural(n, "file is", "files are"))
	}
	if s.FilesLeftOut > 0 {
		sum += fmt.Sprintf("\n\n%d more refused %s not annotated: the saved verdict had no room for them.", s.FilesLeftOut,
			plural(s.FilesLeftOut, "file is", "files are"))
	}
	return cutRunes(sum, MaxCheckSummary)
}

func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}

type checkAnnotation struct {
	Path      string `json:"path"`
	StartLine int    `json:"start_line"`
	EndLine   int    `json:"end_line"`
	Level     string `json:"annotation_level"`
	Message   string `json:"message"`
	Title     string `json:"title,omitempty"`
}

type checkOutput struct {
	Title       string            `json:"title"`
	Summary     string            `json:"summary"`
	Annotations []checkAnnotation `json:"annotations,omitempty"`
}

// checkRunBody is a checks/create body (head_sha set) or a checks/update one (head_sha left
// out: GitHub takes none on an update).
type checkRunBody struct {
	Name        string      `json:"name"`
	HeadSHA     string      `json:"head_sha,omitempty"`
	DetailsURL  string      `json:"details_url,omitempty"`
	ExternalID  string      `json:"external_id"`
	Status      string      `json:"status"`
	Conclusion  string      `json:"conclusion"`
	CompletedAt string      `json:"completed_at"`
	Output      checkOutput `json:"output"`
}

// checkRun is what GitHub answers of a check run (the check-run schema), as far as read.
type checkRun struct {
	ID         int64   `json:"id"`
	Name       string  `json:"name"`
	ExternalID *string `json:"external_id"`
	Status     string  `json:"status"`
	Conclusion *string `json:"conclusion"`
	DetailsURL *string `json:"details_url"`
	Output     struct {
		Title            *string `json:"title"`
		Summary          *string `json:"summary"`
		AnnotationsCount int     `json:"annotations_count"`
	} `json:"output"`
}

func annotationsOf(s Status) []checkAnnotation {
	out := make([]checkAnnotation, 0, len(s.Files))
	for _, f := range s.Files {
		msg := f.Message
		if msg == "" {
			msg = "refused by the rule " + f.Rule
		}
		out = append(out, checkAnnotation{Path: f.Path, StartLine: 1, EndLine: 1, Level: "failure",
			Message: cutRunes(msg, maxAnnotationMessage), Title: cutRunes(f.Rule, maxAnnotationTitle)})
	}
	return out
}

func (c *GitHubChecks) completed() time.Time {
	if c.Completed != nil {
		return c.Completed()
	}
	return time.Now()
}

// body is the check run Publish posts for s, without annotations.
func (c *GitHubChecks) body(s Status) checkRunBody {
	return checkRunBody{Name: s.Context, DetailsURL: s.TargetURL, ExternalID: s.ExternalID, Status: "completed",
		Conclusion: Conclusion(s.State), CompletedAt: c.completed().UTC().Format(time.RFC3339),
		Output: checkOutput{Title: CheckTitle(s.State), Summary: CheckSummary(s)}}
}

func (c *GitHubChecks) repoURL(s Status) (string, error) {
	repo, err := github.RepoPath(s.Repository)
	if err != nil {
		return "", err
	}
	if s.ExternalID == "" {
		return "", &Error{Class: Permanent, Err: errors.New("a check run needs the delivery's key as its external_id")}
	}
	return repo, nil
}

// runs lists the check runs named s.Context on s's commit, every page by GitHub's Link header
// (filter=all: not only the latest of each name), at most readPages of them.
func (c *GitHubChecks) runs(ctx context.Context, base string, s Status) ([]checkRun, error) {
	var all []checkRun
	page := 0
	err := c.Pages(ctx, s.Installation, providerapi.Request{Method: http.MethodGet, MaxBytes: maxCheckRunsPage,
		URL: fmt.Sprintf("%s/commits/%s/check-runs?check_name=%s&filter=all&per_page=%d", base, url.PathEscape(s.SHA),
			url.QueryEscape(s.Context), checkRunsPerPage)}, readPages, func(a *providerapi.Answer) (bool, error) {
		page++
		var list struct {
			CheckRuns []checkRun `json:"check_runs"`
		}
		if err := a.Decode(fmt.Sprintf("page %d of the commit's check runs", page), &list); err != nil {
			return false, err
		}
		all = append(all, list.CheckRuns...)
		return true, nil
	})
	return all, err
}

// mayStand is a failure after a check run of this delivery exists: it stands, perhaps without
// every annotation, so the failure is Unknown (read back before anything is posted again).
func mayStand(err error) error {
	var pe *Error
	if errors.As(err, &pe) {
		e := *pe
		e.Unknown = true
		return &e
	}
	return &Error{Class: Transient, Unknown: true, Err: err}
}

// ours returns this delivery's check run among runs when it is the latest of the name (the
// highest id), which an update keeps shown; nil when there is none, or when another check run
// of the name was created after it (an older verdict's create that GitHub applied late, another
// App's): updating ours in place would leave that one shown, so a new check run is created.
func ours(runs []checkRun, s Status) *checkRun {
	if r := latest(runs, s.Context); r != nil && deref(r.ExternalID) == s.ExternalID {
		return r
	}
	return nil
}

// latest returns the check run named name with the highest id among runs, or nil.
func latest(runs []checkRun, name string) *checkRun {
	var last *checkRun
	for i := range runs {
		if r := &runs[i]; r.Name == name && (last == nil || r.ID > last.ID) {
			last = r
		}
	}
	return last
}

// Publish implements Publisher: it creates this delivery's check run, or finds it by its
// external_id and updates it, then adds the annotations that do not stand yet, 50 a request.
func (c *GitHubChecks) Publish(ctx context.Context, s Status) error {
	base, err := c.repoURL(s)
	if err != nil {
		return err
	}
	runs, err := c.runs(ctx, base, s)
	if err != nil {
		return err
	}
	anns := annotationsOf(s)
	body := c.body(s)
	batch := func(from int) []checkAnnotation { return anns[from:min(from+MaxAnnotationsPerRequest, len(anns))] }
	var id int64
	done := 0
	if mine := ours(runs, s); mine != nil {
		id, done = mine.ID, min(mine.Output.AnnotationsCount, len(anns))
		body.Output.Annotations = batch(done)
		if _, err := c.Do(ctx, s.Installation, providerapi.Request{Method: http.MethodPatch, URL: fmt.Sprintf("%s/check-runs/%d", base, id), Body: body}); err != nil {
			return mayStand(err)
		}
	} else {
		body.HeadSHA = s.SHA
		body.Output.Annotations = batch(0)
		answer, err := c.Do(ctx, s.Installation, providerapi.Request{Method: http.MethodPost, URL: base + "/check-runs", Body: body,
			MaxBytes: maxCheckRunsPage})
		if err != nil {
			return err // Unknown when the create may have landed: the next attempt finds it
		}
		var run checkRun
		if answer.Decode("the check run created", &run) != nil || run.ID == 0 {
			return &Error{Class: Transient, Unknown: true, Err: errors.New("github created the check run and answered without its id")}
		}
		id, body.HeadSHA = run.ID, ""
	}
	done += len(body.Output.Annotations)
	for done < len(anns) {
		body.Output.Annotations = batch(done)
		if _, err := c.Do(ctx, s.Installation, providerapi.Request{Method: http.MethodPatch, URL: fmt.Sprintf("%s/check-runs/%d", base, id), Body: body}); err != nil {
			return mayStand(err)
		}
		done += len(body.Output.Annotations)
	}
	return nil
}

// Standing implements Publisher (see GitHubChecks).
func (c *GitHubChecks) Standing(ctx context.Context, s Status) (Standing, error) {
	base, err := c.repoURL(s)
	if err != nil {
		return 0, err
	}
	runs, err := c.runs(ctx, base, s)
	if err != nil {
		return 0, err
	}
	last := latest(runs, s.Context)
	switch {
	case last == nil:
		return StandingNone, nil
	case deref(last.ExternalID) != s.ExternalID:
		return StandingOther, nil
	case shows(last, c.body(s), len(s.Files)):
		return StandingOurs, nil
	}
	return StandingNone, nil // ours, unfinished: Publish finishes it in place
}

// shows reports whether run shows everything of want (completed_at aside) and n annotations.
func shows(run *checkRun, want checkRunBody, n int) bool {
	return run.Status == "completed" && deref(run.Conclusion) == want.Conclusion && deref(run.Output.Title) == want.Output.Title &&
		deref(run.Output.Summary) == want.Output.Summary && run.Output.AnnotationsCount >= n &&
		(want.DetailsURL == "" || deref(run.DetailsURL) == want.DetailsURL)
}
