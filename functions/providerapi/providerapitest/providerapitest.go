// Package providerapitest holds what the fakes of the provider APIs share (githubtest,
// giteatest, gitlabtest, bitbuckettest, bitbucketdctest): how a fake answers a write a test
// wants to go wrong, what it records of the requests it served (Record), the repositories'
// history its reads answer from (History, Pulls), a page and a next-page link as the
// providers write them; and the checks every provider's reader test runs against its fake.
// Each fake keeps its provider's own wire format and rules.
package providerapitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Behavior is how a fake answers one write (a status's POST, a check run's create or update).
type Behavior struct {
	// Code, when not zero, is answered instead of applying the write, with the provider's
	// error body and Header.
	Code   int
	Header map[string]string
	// Delay holds the answer back; the write is applied before the delay when ApplyFirst is
	// set, after it otherwise (whether or not the client is still there).
	Delay      time.Duration
	ApplyFirst bool
	// Lost applies the write, then answers Lost (a 500, a gateway's 502 or 504) instead of
	// its result.
	Lost int
	// Cut applies the write, then closes the connection without an answer: the client learns
	// nothing of the outcome, whatever its timeout.
	Cut bool
}

// Write carries out b for a write whose effect is apply (which returns the answer's body,
// answered with code); refuse answers a Code or a Lost status with the provider's error body.
func Write(w http.ResponseWriter, code int, b Behavior, apply func() any, answer func(http.ResponseWriter, int, any),
	refuse func(http.ResponseWriter, int)) {
	if b.Code != 0 {
		for k, v := range b.Header {
			w.Header().Set(k, v)
		}
		refuse(w, b.Code)
		return
	}
	var body any
	if b.ApplyFirst || b.Cut || b.Lost != 0 {
		body = apply()
	}
	switch {
	case b.Cut:
		Cut(w)
		return
	case b.Lost != 0:
		refuse(w, b.Lost)
		return
	}
	// The write is finished whether or not the client is still waiting for the answer.
	time.Sleep(b.Delay)
	if !b.ApplyFirst {
		body = apply()
	}
	answer(w, code, body)
}

// Cut closes the connection without an answer.
func Cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // the server closes the connection
}

// JSON answers v as JSON with code, and the provider's Date (unless one was set).
func JSON(w http.ResponseWriter, code int, v any, now time.Time) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if w.Header().Get("Date") == "" {
		w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// PageURL is r's URL on the fake with its query's name set to value (a page number, a start).
func PageURL(r *http.Request, name string, value int) string {
	q := r.URL.Query()
	q.Set(name, strconv.Itoa(value))
	return (&url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}).String()
}

// Link sets the Link header of page of a listing of total items, perPage a page, pages named
// by the query parameter pageParam: next and last when there is a next page, as GitHub, Gitea
// and GitLab do (no header when the list fits one page).
func Link(w http.ResponseWriter, r *http.Request, pageParam string, page, perPage, total int) {
	last := max((total+perPage-1)/perPage, 1)
	if page >= last {
		return
	}
	w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next", <%s>; rel="last"`, PageURL(r, pageParam, page+1), PageURL(r, pageParam, last)))
}

// PageOf is page (from 1) of all, perPage a page.
func PageOf[T any](all []T, page, perPage int) []T {
	from := (page - 1) * perPage
	if from >= len(all) || from < 0 {
		return []T{}
	}
	return all[from:min(from+perPage, len(all))]
}
