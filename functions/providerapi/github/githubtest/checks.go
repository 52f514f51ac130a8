package githubtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"
)

// CheckRun is one check run the fake holds.
type CheckRun struct {
	ID                                int64
	Repository, HeadSHA               string
	Name, ExternalID, DetailsURL      string
	Status, Conclusion                string
	StartedAt, CompletedAt            string
	Title, Summary, Text              string
	Annotations                       []Annotation
	Updates                           int
	CreatedAt                         time.Time
	hasExternalID, hasDetails, hasOut bool
}

// Annotation is one annotation of a check run.
type Annotation struct {
	Path               string
	StartLine, EndLine int
	Level              string
	Message, Title     string
}

// body reads a request's JSON object, or answers the violation and returns nil.
func (g *GitHub) body(w http.ResponseWriter, r *http.Request) map[string]json.RawMessage {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		g.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return nil
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		g.violate(w, http.StatusBadRequest, "Problems parsing JSON: the body is not a JSON object (%v)", err)
		return nil
	}
	return fields
}

// Enums of the description (components of checks/create and checks/update).
var (
	checkStatuses    = []string{"queued", "in_progress", "completed", "waiting", "requested", "pending"}
	checkConclusions = []string{"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}
	annotationLevels = []string{"notice", "warning", "failure"}
)

// str decodes a JSON string (not null: no property of these bodies is nullable).
func str(v json.RawMessage) (string, bool) {
	var s *string
	if json.Unmarshal(v, &s) != nil || s == nil {
		return "", false
	}
	return *s, true
}

// integer decodes a JSON integer.
func integer(v json.RawMessage) (int, bool) {
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var n any
	if d.Decode(&n) != nil {
		return 0, false
	}
	num, ok := n.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(num))
	return i, err == nil
}

// checkFields validates the top-level fields of a create (create true) or an update into run.
// It returns the violation's message, or "".
func checkFields(fields map[string]json.RawMessage, create bool, run *CheckRun) string {
	allowed := map[string]bool{"name": true, "details_url": true, "external_id": true, "status": true, "started_at": true,
		"conclusion": true, "completed_at": true, "output": true, "actions": true}
	if create {
		allowed["head_sha"] = true
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fields[k]
		if !allowed[k] {
			return fmt.Sprintf("Invalid request: %q is not a permitted key", k)
		}
		switch k {
		case "output":
			if msg := checkOutput(v, create, run); msg != "" {
				return msg
			}
			run.hasOut = true
		case "actions":
			if msg := checkActions(v); msg != "" {
				return msg
			}
		default:
			s, ok := str(v)
			if !ok {
				return fmt.Sprintf("Invalid request: %s is not a string: %s", k, v)
			}
			switch k {
			case "name":
				run.Name = s
			case "head_sha":
				run.HeadSHA = s
			case "details_url":
				run.DetailsURL, run.hasDetails = s, true
			case "external_id":
				run.ExternalID, run.hasExternalID = s, true
			case "status":
				if !oneOf(s, checkStatuses) {
					return fmt.Sprintf("Invalid request: status %q is not one of %v", s, checkStatuses)
				}
				run.Status = s
			case "conclusion":
				if !oneOf(s, checkConclusions) {
					return fmt.Sprintf("Invalid request: conclusion %q is not one of %v", s, checkConclusions)
				}
				if s == "stale" {
					return "Invalid request: only GitHub can set the conclusion stale"
				}
				run.Conclusion = s
			case "started_at", "completed_at":
				if _, err := time.Parse(time.RFC3339, s); err != nil {
					return fmt.Sprintf("Invalid request: %s %q is not a date-time", k, s)
				}
				if k == "started_at" {
					run.StartedAt = s
				} else {
					run.CompletedAt = s
				}
			}
		}
	}
	return ""
}

// checkOutput validates an output object: title and summary required on a create, summary on
// an update (and title, which the update's description marks **Required**); summary and text
// at most 65,535 characters; at most 50 annotations, each an object with path, start_line,
// end_line, annotation_level (notice, warning, failure) and message required, columns only
// within one line; images with alt and image_url.
func checkOutput(v json.RawMessage, create bool, run *CheckRun) string {
	var out map[string]json.RawMessage
	if json.Unmarshal(v, &out) != nil || out == nil {
		return "Invalid request: output is not an object"
	}
	for _, k := range []string{"title", "summary"} {
		if _, ok := out[k]; !ok {
			return fmt.Sprintf("Invalid request: output.%s wasn't supplied", k)
		}
	}
	for k, f := range out {
		switch k {
		case "title", "summary", "text":
			s, ok := str(f)
			if !ok {
				return fmt.Sprintf("Invalid request: output.%s is not a string", k)
			}
			if n := utf8.RuneCountInString(s); k != "title" && n > 65535 {
				return fmt.Sprintf("Invalid request: output.%s is %d characters, maximum is 65535", k, n)
			}
			switch k {
			case "title":
				run.Title = s
			case "summary":
				run.Summary = s
			default:
				run.Text = s
			}
		case "annotations":
			var list []json.RawMessage
			if json.Unmarshal(f, &list) != nil {
				return "Invalid request: output.annotations is not an array"
			}
			if len(list) > 50 {
				return fmt.Sprintf("Invalid request: output.annotations has %d items, maximum is 50 per request", len(list))
			}
			for i, a := range list {
				ann, msg := checkAnnotation(a)
				if msg != "" {
					return fmt.Sprintf("Invalid request: output.annotations[%d]: %s", i, msg)
				}
				run.Annotations = append(run.Annotations, ann)
			}
		case "images":
			var list []map[string]json.RawMessage
			if json.Unmarshal(f, &list) != nil {
				return "Invalid request: output.images is not an array of objects"
			}
			for i, img := range list {
				for _, r := range []string{"alt", "image_url"} {
					if _, ok := str(img[r]); !ok {
						return fmt.Sprintf("Invalid request: output.images[%d].%s wasn't supplied as a string", i, r)
					}
				}
			}
		default:
			return fmt.Sprintf("Invalid request: output.%s is not a permitted key", k)
		}
	}
	return ""
}

func checkAnnotation(v json.RawMessage) (Annotation, string) {
	var f map[string]json.RawMessage
	if json.Unmarshal(v, &f) != nil || f == nil {
		return Annotation{}, "not an object"
	}
	var a Annotation
	cols := 0
	for k, raw := range f {
		switch k {
		case "path", "annotation_level", "message", "title", "raw_details":
			s, ok := str(raw)
			if !ok {
				return a, k + " is not a string"
			}
			switch k {
			case "path":
				a.Path = s
			case "annotation_level":
				if !oneOf(s, annotationLevels) {
					return a, fmt.Sprintf("annotation_level %q is not one of %v", s, annotationLevels)
				}
				a.Level = s
			case "message":
				if len(s) > 64<<10 {
					return a, "message is over 64 KB"
				}
				a.Message = s
			case "title":
				if n := utf8.RuneCountInString(s); n > 255 {
					return a, fmt.Sprintf("title is %d characters, maximum is 255", n)
				}
				a.Title = s
			}
		case "start_line", "end_line", "start_column", "end_column":
			n, ok := integer(raw)
			if !ok {
				return a, k + " is not an integer"
			}
			switch k {
			case "start_line":
				a.StartLine = n
			case "end_line":
				a.EndLine = n
			default:
				cols++
			}
		default:
			return a, fmt.Sprintf("%q is not a permitted key", k)
		}
	}
	for _, r := range []string{"path", "start_line", "end_line", "annotation_level", "message"} {
		if _, ok := f[r]; !ok {
			return a, r + " wasn't supplied"
		}
	}
	switch {
	case a.StartLine < 1:
		return a, "start_line must be at least 1 (line numbers start at 1)"
	case a.EndLine < a.StartLine:
		return a, "end_line is before start_line"
	case cols > 0 && a.StartLine != a.EndLine:
		return a, "start_column and end_column are only supported on one line"
	}
	return a, ""
}

func checkActions(v json.RawMessage) string {
	var list []map[string]json.RawMessage
	if json.Unmarshal(v, &list) != nil {
		return "Invalid request: actions is not an array of objects"
	}
	if len(list) > 3 {
		return fmt.Sprintf("Invalid request: %d actions, maximum is 3", len(list))
	}
	for i, a := range list {
		for k, max := range map[string]int{"label": 20, "description": 40, "identifier": 20} {
			s, ok := str(a[k])
			if !ok || utf8.RuneCountInString(s) > max {
				return fmt.Sprintf("Invalid request: actions[%d].%s must be a string of at most %d characters", i, k, max)
			}
		}
	}
	return ""
}

// completedRule is the status/conclusion rule of both operations (the oneOf of checks/create,
// the anyOf of checks/update, and conclusion's "Required if you provide completed_at or a
// status of completed"): completed needs a conclusion; a conclusion makes the run completed.
// A create takes only queued, in_progress or completed (the others are GitHub Actions').
func completedRule(fields map[string]json.RawMessage, run *CheckRun, create bool) string {
	_, hasStatus := fields["status"]
	_, hasConclusion := fields["conclusion"]
	_, hasCompletedAt := fields["completed_at"]
	switch {
	case hasStatus && run.Status == "completed" && !hasConclusion:
		return "Invalid request: conclusion wasn't supplied for the status completed"
	case hasCompletedAt && !hasConclusion:
		return "Invalid request: conclusion wasn't supplied with completed_at"
	case create && hasStatus && !oneOf(run.Status, []string{"queued", "in_progress", "completed"}):
		return fmt.Sprintf("Invalid request: only GitHub Actions can set the status %s", run.Status)
	}
	return ""
}

func (g *GitHub) createRun(w http.ResponseWriter, r *http.Request, repo string) {
	fields := g.body(w, r)
	if fields == nil {
		return
	}
	run := CheckRun{Repository: repo, Status: "queued"}
	if msg := checkFields(fields, true, &run); msg != "" {
		g.violate(w, http.StatusUnprocessableEntity, "%s", msg)
		return
	}
	for _, k := range []string{"name", "head_sha"} {
		if _, ok := fields[k]; !ok {
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s wasn't supplied", k)
			return
		}
	}
	if msg := completedRule(fields, &run, true); msg != "" {
		g.violate(w, http.StatusUnprocessableEntity, "%s", msg)
		return
	}
	if run.Conclusion != "" {
		run.Status = "completed"
	}
	g.mu.Lock()
	g.creates++
	n := g.creates
	g.mu.Unlock()
	b := Behavior{}
	if g.Create != nil {
		b = g.Create(n, run)
	}
	g.write(w, http.StatusCreated, b, func() any { return runJSON(g.AddCheckRun(run)) })
}

// AddCheckRun adds a check run as if created (its ID and time set), and returns it.
func (g *GitHub) AddCheckRun(run CheckRun) CheckRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	run.ID, run.CreatedAt = int64(len(g.runs)+1), g.now()
	if run.ExternalID != "" {
		run.hasExternalID = true
	}
	if run.Title != "" || run.Summary != "" {
		run.hasOut = true
	}
	g.runs = append(g.runs, run)
	return cloneRun(run)
}

func cloneRun(r CheckRun) CheckRun {
	r.Annotations = append([]Annotation(nil), r.Annotations...)
	return r
}

func (g *GitHub) updateRun(w http.ResponseWriter, r *http.Request, repo string, id int64) {
	fields := g.body(w, r)
	if fields == nil {
		return
	}
	var in CheckRun
	if msg := checkFields(fields, false, &in); msg != "" {
		g.violate(w, http.StatusUnprocessableEntity, "%s", msg)
		return
	}
	if msg := completedRule(fields, &in, false); msg != "" {
		g.violate(w, http.StatusUnprocessableEntity, "%s", msg)
		return
	}
	g.mu.Lock()
	i := g.find(repo, id)
	if i < 0 {
		g.mu.Unlock()
		g.violate(w, http.StatusNotFound, "Not Found: no check run %d in %s", id, repo)
		return
	}
	g.updates++
	n := g.updates
	cur := cloneRun(g.runs[i])
	g.mu.Unlock()
	b := Behavior{}
	if g.Update != nil {
		b = g.Update(n, cur)
	}
	g.write(w, http.StatusOK, b, func() any {
		g.mu.Lock()
		defer g.mu.Unlock()
		run := &g.runs[g.find(repo, id)]
		if _, ok := fields["name"]; ok {
			run.Name = in.Name
		}
		if in.hasDetails {
			run.DetailsURL, run.hasDetails = in.DetailsURL, true
		}
		if in.hasExternalID {
			run.ExternalID, run.hasExternalID = in.ExternalID, true
		}
		if in.Status != "" {
			run.Status = in.Status
		}
		if in.Conclusion != "" {
			run.Conclusion, run.Status = in.Conclusion, "completed"
		}
		if in.StartedAt != "" {
			run.StartedAt = in.StartedAt
		}
		if in.CompletedAt != "" {
			run.CompletedAt = in.CompletedAt
		}
		if in.hasOut {
			run.Title, run.Summary, run.Text, run.hasOut = in.Title, in.Summary, in.Text, true
			run.Annotations = append(run.Annotations, in.Annotations...) // GitHub appends them
		}
		run.Updates++
		return runJSON(cloneRun(*run))
	})
}

// find is the index of check run id of repo, or -1. g.mu is held.
func (g *GitHub) find(repo string, id int64) int {
	if id < 1 || id > int64(len(g.runs)) || g.runs[id-1].Repository != repo {
		return -1
	}
	return int(id - 1)
}

func (g *GitHub) getRun(w http.ResponseWriter, repo string, id int64) {
	g.mu.Lock()
	i := g.find(repo, id)
	var run CheckRun
	if i >= 0 {
		run = cloneRun(g.runs[i])
	}
	g.mu.Unlock()
	if i < 0 {
		g.violate(w, http.StatusNotFound, "Not Found: no check run %d in %s", id, repo)
		return
	}
	g.answer(w, http.StatusOK, runJSON(run))
}

// listRuns answers checks/list-for-ref: check_name, status (queued, in_progress, completed),
// filter (latest: the latest of each name by completed_at; all), app_id, per_page (at most
// 100, default 30) and page, with GitHub's Link header. It lists oldest first: GitHub
// documents no order, and a client must not depend on one.
func (g *GitHub) listRuns(w http.ResponseWriter, r *http.Request, repo, ref string) {
	q := r.URL.Query()
	for k := range q {
		if !oneOf(k, []string{"check_name", "status", "filter", "per_page", "page", "app_id"}) {
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %q is not a parameter of checks/list-for-ref", k)
			return
		}
	}
	if s := q.Get("status"); s != "" && !oneOf(s, []string{"queued", "in_progress", "completed"}) {
		g.violate(w, http.StatusUnprocessableEntity, "Invalid request: status %q", s)
		return
	}
	filter := q.Get("filter")
	if filter == "" {
		filter = "latest"
	}
	if !oneOf(filter, []string{"latest", "all"}) {
		g.violate(w, http.StatusUnprocessableEntity, "Invalid request: filter %q is not latest or all", filter)
		return
	}
	page, perPage, ok := g.pageQuery(w, q)
	if !ok {
		return
	}
	g.mu.Lock()
	var match []CheckRun
	for _, run := range g.runs {
		if run.Repository == repo && run.HeadSHA == ref && (q.Get("check_name") == "" || run.Name == q.Get("check_name")) &&
			(q.Get("status") == "" || run.Status == q.Get("status")) {
			match = append(match, cloneRun(run))
		}
	}
	g.mu.Unlock()
	if filter == "latest" {
		latest := map[string]int{}
		var kept []CheckRun
		for _, run := range match {
			i, ok := latest[run.Name]
			switch {
			case !ok:
				latest[run.Name] = len(kept)
				kept = append(kept, run)
			case run.CompletedAt >= kept[i].CompletedAt:
				kept[i] = run
			}
		}
		match = kept
	}
	out := []map[string]any{}
	for _, run := range pageOf(match, page, perPage) {
		out = append(out, runJSON(run))
	}
	link(w, r, page, perPage, len(match))
	g.answer(w, http.StatusOK, map[string]any{"total_count": len(match), "check_runs": out})
}

// runJSON is a check run as the check-run schema gives it.
func runJSON(r CheckRun) map[string]any {
	null := func(s string, set bool) any {
		if !set && s == "" {
			return nil
		}
		return s
	}
	url := fmt.Sprintf("https://api.github.com/repos/%s/check-runs/%d", r.Repository, r.ID)
	return map[string]any{
		"id": r.ID, "node_id": fmt.Sprintf("CR_%d", r.ID), "head_sha": r.HeadSHA, "name": r.Name,
		"external_id": null(r.ExternalID, r.hasExternalID), "url": url,
		"html_url":    fmt.Sprintf("https://github.com/%s/runs/%d", r.Repository, r.ID),
		"details_url": null(r.DetailsURL, r.hasDetails), "status": r.Status, "conclusion": null(r.Conclusion, false),
		"started_at": null(r.StartedAt, false), "completed_at": null(r.CompletedAt, false),
		"output": map[string]any{"title": null(r.Title, r.hasOut), "summary": null(r.Summary, r.hasOut), "text": null(r.Text, false),
			"annotations_count": len(r.Annotations), "annotations_url": url + "/annotations"},
		"check_suite": map[string]any{"id": 1}, "app": map[string]any{"id": 1, "slug": "amiss"}, "pull_requests": []any{},
	}
}

// Runs returns the check runs of a commit, in the order they were created.
func (g *GitHub) Runs(repo, sha string) []CheckRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []CheckRun
	for _, r := range g.runs {
		if r.Repository == repo && r.HeadSHA == sha {
			out = append(out, cloneRun(r))
		}
	}
	return out
}

// LatestRun returns the check run a user sees for a commit and name: the last one created.
func (g *GitHub) LatestRun(repo, sha, name string) (CheckRun, bool) {
	all := g.Runs(repo, sha)
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Name == name {
			return all[i], true
		}
	}
	return CheckRun{}, false
}

// Creates counts the check-run creates that passed validation.
func (g *GitHub) Creates() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.creates
}

// Updates counts the check-run updates that passed validation.
func (g *GitHub) Updates() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.updates
}
