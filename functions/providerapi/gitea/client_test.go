package gitea_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/gitea"
)

// Gitea pages by page and limit: a listing names its next page in a Link header (and its
// previous one on the last page); the combined status of a ref names only its count, in
// X-Total-Count. Both are read to their end, and the token goes with every page. Behind a
// proxy that drops both headers, the pages are read on until one is empty.
func TestGiteaListingsAreReadToTheirEnd(t *testing.T) {
	const items = 120
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token gt" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		from, to := (page-1)*limit, min(page*limit, items)
		if r.URL.Path == "/api/v1/linked" && to < items {
			w.Header().Set("Link", fmt.Sprintf(`<http://%s/api/v1/linked?limit=%d&page=%d>; rel="next"`, r.Host, limit, page+1))
		} else if r.URL.Path == "/api/v1/linked" {
			w.Header().Set("Link", fmt.Sprintf(`<http://%s/api/v1/linked?limit=%d&page=%d>; rel="prev"`, r.Host, limit, page-1))
		}
		from, to = min(from, items), max(min(to, items), min(from, items))
		if r.URL.Path == "/api/v1/counted" {
			w.Header().Set("X-Total-Count", strconv.Itoa(items))
		}
		fmt.Fprintf(w, `{"from":%d,"to":%d}`, from, to)
	}))
	defer srv.Close()
	c := gitea.NewClient(srv.URL, "gt", srv.Client())
	for _, path := range []string{"/api/v1/linked", "/api/v1/counted", "/api/v1/bare"} {
		seen := 0
		err := c.Pages(context.Background(), providerapi.Request{Method: http.MethodGet, URL: path + "?limit=50&page=1"}, 0,
			func(a *providerapi.Answer) (bool, error) {
				var p struct{ From, To int }
				if err := a.Decode("a page", &p); err != nil || p.From != seen {
					return false, fmt.Errorf("page from %d after %d: %v", p.From, seen, err)
				}
				seen = p.To
				return p.To > p.From, nil
			})
		if err != nil || seen != items {
			t.Errorf("%s: read %d of %d: %v", path, seen, items, err)
		}
	}
}
