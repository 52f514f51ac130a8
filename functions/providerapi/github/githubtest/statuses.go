package githubtest

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
)

// Created is one commit status the fake created.
type Created struct {
	ID                                     int64
	Repository, SHA                        string
	Context, State, Description, TargetURL string
	At                                     time.Time
}

// createStatus answers repos/create-commit-status: a JSON body of state (required: error,
// failure, pending or success), target_url, description (strings or null; a description of at
// most 140 characters) and context (a string, "default" when left out), answered 201 with the
// status.
func (g *GitHub) createStatus(w http.ResponseWriter, r *http.Request, repo, sha string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		g.violate(w, http.StatusUnsupportedMediaType, "Content-Type %q", ct)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		g.violate(w, http.StatusBadRequest, "Problems parsing JSON: %v", err)
		return
	}
	s := Created{Repository: repo, SHA: sha, Context: "default"}
	for name, v := range fields {
		var str *string
		if err := json.Unmarshal(v, &str); err != nil {
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %s is not a string", name)
			return
		}
		switch name {
		case "state":
			if str == nil || !oneOf(*str, []string{"error", "failure", "pending", "success"}) {
				g.violate(w, http.StatusUnprocessableEntity, "Invalid request: state %s is not one of error, failure, pending, success", v)
				return
			}
			s.State = *str
		case "target_url":
			if str != nil {
				s.TargetURL = *str
			}
		case "description":
			if str != nil {
				s.Description = *str
			}
		case "context":
			if str == nil {
				g.violate(w, http.StatusUnprocessableEntity, "Invalid request: context is null")
				return
			}
			s.Context = *str
		default:
			g.violate(w, http.StatusUnprocessableEntity, "Invalid request: %q is not a permitted key", name)
			return
		}
	}
	if s.State == "" {
		g.violate(w, http.StatusUnprocessableEntity, "Invalid request: state wasn't supplied")
		return
	}
	if n := utf8.RuneCountInString(s.Description); n > 140 {
		g.violate(w, http.StatusUnprocessableEntity, "Validation Failed: description is too long (%d characters, maximum is 140)", n)
		return
	}
	g.mu.Lock()
	g.posts++
	n := g.posts
	g.mu.Unlock()
	b := Behavior{}
	if g.Post != nil {
		b = g.Post(n, s)
	}
	g.write(w, http.StatusCreated, b, func() any {
		s = g.AddStatus(s)
		return statusJSON(s)
	})
}

// write carries out b for a write whose effect is apply (which returns the answer's body,
// answered with code).
func (g *GitHub) write(w http.ResponseWriter, code int, b Behavior, apply func() any) {
	providerapitest.Write(w, code, b, apply, g.answer, func(w http.ResponseWriter, code int) { g.refuse(w, code, http.StatusText(code)) })
}

func statusJSON(s Created) map[string]any {
	return map[string]any{"id": s.ID, "state": s.State, "description": s.Description, "target_url": s.TargetURL, "context": s.Context,
		"created_at": s.At.UTC().Format(time.RFC3339), "updated_at": s.At.UTC().Format(time.RFC3339)}
}

// AddStatus adds a commit status as if posted (its ID and time set), and returns it.
func (g *GitHub) AddStatus(s Created) Created {
	return g.created.Add(s, func(s Created, held, _ int) Created {
		s.ID, s.At = int64(held+1), g.now()
		return s
	})
}

// combined answers repos/get-combined-status-for-ref: the latest status of each context, in
// the order the contexts first appeared, paged.
func (g *GitHub) combined(w http.ResponseWriter, r *http.Request, repo, ref string) {
	page, perPage, ok := g.pageQuery(w, r.URL.Query())
	if !ok {
		return
	}
	current := g.created.Current(repo, ref)
	statuses := []map[string]any{}
	for _, s := range pageOf(current, page, perPage) {
		statuses = append(statuses, statusJSON(s))
	}
	link(w, r, page, perPage, len(current))
	g.answer(w, http.StatusOK, map[string]any{"state": "pending", "sha": ref, "total_count": len(current), "statuses": statuses})
}

// Created returns every status created for the commit, oldest first.
func (g *GitHub) Created(repo, sha string) []Created { return g.created.Of(repo, sha) }

// Latest returns the status a user sees for a commit and context: the last one created.
func (g *GitHub) Latest(repo, sha, context string) (Created, bool) {
	return g.created.Latest(repo, sha, context)
}

// Posts counts the status POSTs received (those that passed validation).
func (g *GitHub) Posts() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.posts
}

func oneOf(s string, set []string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}
