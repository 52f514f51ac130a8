package providerapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// DefaultMaxPages bounds a listing read by default: a provider that keeps answering a next
// page past it is answered with a Transient error, never with a list taken as whole.
const DefaultMaxPages = 50

// NextLink returns the target of the Link header's rel="next" (RFC 8288), as GitHub, Gitea
// and GitLab send it, or "" when there is none. linked says whether the answer carried a Link
// header at all (an answer without one may come from a proxy that strips it).
func NextLink(h http.Header) (next string, linked bool) {
	for _, v := range h.Values("Link") {
		linked = true
		for _, link := range splitLinks(v) {
			target, params, ok := strings.Cut(link, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
				if !strings.EqualFold(strings.TrimSpace(name), "rel") {
					continue
				}
				for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(value), `"`)) {
					if strings.EqualFold(rel, "next") {
						return target[1 : len(target)-1], true
					}
				}
			}
		}
	}
	return "", linked
}

// splitLinks splits a Link header's value at the commas between links (not those inside a
// URL's angle brackets or a quoted parameter).
func splitLinks(v string) []string {
	var out []string
	depth, quoted, from := 0, false, 0
	for i, r := range v {
		switch {
		case r == '"' && depth == 0:
			quoted = !quoted
		case r == '<' && !quoted:
			depth++
		case r == '>' && !quoted && depth > 0:
			depth--
		case r == ',' && depth == 0 && !quoted:
			out = append(out, v[from:i])
			from = i + 1
		}
	}
	return append(out, v[from:])
}

// Pages reads a listing as a provider pages it: it sends r with send (the provider's client,
// which adds its credential), gives each answer to visit, which reads the page and says whether
// to read on, and asks next for the URL of the page after it (the provider's own paging rule;
// "" when the listing ends there). It reads at most maxPages pages (0: DefaultMaxPages): a
// listing with more is a Transient error naming the listing's path, never a list taken as
// whole. An error of send, visit or next is returned as it is.
func Pages(ctx context.Context, send func(context.Context, Request) (*Answer, error), r Request, maxPages int,
	next func(*Answer) (string, error), visit func(*Answer) (more bool, err error)) error {
	if maxPages <= 0 {
		maxPages = DefaultMaxPages
	}
	for page := 1; ; page++ {
		a, err := send(ctx, r)
		if err != nil {
			return err
		}
		more, err := visit(a)
		if err != nil || !more {
			return err
		}
		u, err := next(a)
		if err != nil || u == "" {
			return err
		}
		if page >= maxPages {
			return &Error{Class: Transient, Err: fmt.Errorf("%s lists more than %d pages", a.URL.EscapedPath(), maxPages)}
		}
		r.URL = u
	}
}
