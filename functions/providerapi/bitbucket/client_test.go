package bitbucket_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
)

// Bitbucket Cloud names the next page's URL in each page's "next", absent on the last; a next
// page on another host is never asked for with the token.
func TestBitbucketCloudListingsFollowNext(t *testing.T) {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer bb" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var page int
		fmt.Sscan(r.URL.Query().Get("page"), &page)
		next := ""
		switch {
		case r.URL.Path == "/2.0/away":
			next = `,"next":"https://elsewhere.example/2.0/away?page=2"`
		case page < 3:
			next = fmt.Sprintf(`,"next":"%s/2.0/list?page=%d"`, srv.URL, page+1)
		}
		fmt.Fprintf(w, `{"pagelen":10,"page":%d,"values":[{"n":%d}]%s}`, page, page, next)
	}))
	defer srv.Close()
	c := bitbucket.NewClient(srv.URL, "bb", srv.Client())
	var got []int
	err := c.Pages(context.Background(), providerapi.Request{Method: http.MethodGet, URL: "/2.0/list?page=1"}, 0, func(a *providerapi.Answer) (bool, error) {
		var values []struct{ N int }
		err := bitbucket.Values(a, "a page", &values)
		for _, v := range values {
			got = append(got, v.N)
		}
		return true, err
	})
	if err != nil || fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("pages %v: %v", got, err)
	}
	err = c.Pages(context.Background(), providerapi.Request{Method: http.MethodGet, URL: "/2.0/away?page=1"}, 0, func(*providerapi.Answer) (bool, error) { return true, nil })
	if providerapi.ClassOf(err) != providerapi.Operator {
		t.Fatalf("a next page on another host: %v", err)
	}
}
