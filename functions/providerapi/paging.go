package providerapi

import (
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
