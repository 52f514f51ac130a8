package providerapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi"
)

// endlessListing serves pages 1, 2, ... of /list, each naming the next in its Link header,
// without end, and counts the requests.
func endlessListing(t *testing.T) (*providerapi.Client, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		w.Header().Set("Link", fmt.Sprintf(`<http://%s/list?page=%d>; rel="next"`, r.Host, page+1))
		fmt.Fprintf(w, `[%d]`, page)
	}))
	t.Cleanup(srv.Close)
	return &providerapi.Client{BaseURL: srv.URL, HTTP: srv.Client()}, &requests
}

func nextLink(a *providerapi.Answer) (string, error) {
	next, _ := providerapi.NextLink(a.Header)
	return next, nil
}

// A listing that names a next page past the bound is read to the bound and answered with a
// Transient error naming its path: never taken as whole, and never read further.
func TestAListingPastItsPageBoundIsTransient(t *testing.T) {
	c, requests := endlessListing(t)
	var pages []string
	err := providerapi.Pages(context.Background(), c.Do, providerapi.Request{Method: http.MethodGet, URL: "/list?page=1"}, 3, nextLink,
		func(a *providerapi.Answer) (bool, error) {
			pages = append(pages, string(a.Body))
			return true, nil
		})
	if providerapi.ClassOf(err) != providerapi.Transient || err == nil || !strings.Contains(err.Error(), "/list lists more than 3 pages") {
		t.Fatalf("a listing past 3 pages: %v", err)
	}
	if got := strings.Join(pages, " "); got != "[1] [2] [3]" || requests.Load() != 3 {
		t.Errorf("read %s in %d requests, want [1] [2] [3] in 3", got, requests.Load())
	}
}

// visit's word ends the listing: a stop after the second page sends no third request, and
// visit's error, or the page rule's, is returned as it is, with nothing more sent.
func TestAListingEndsWhereVisitOrThePageRuleSays(t *testing.T) {
	first := providerapi.Request{Method: http.MethodGet, URL: "/list?page=1"}
	c, requests := endlessListing(t)
	pages := 0
	err := providerapi.Pages(context.Background(), c.Do, first, 0, nextLink, func(*providerapi.Answer) (bool, error) {
		pages++
		return pages < 2, nil
	})
	if err != nil || requests.Load() != 2 {
		t.Errorf("visit stopped after page 2: %v after %d requests", err, requests.Load())
	}

	c, requests = endlessListing(t)
	refused := errors.New("the page does not decode")
	err = providerapi.Pages(context.Background(), c.Do, first, 0, nextLink, func(*providerapi.Answer) (bool, error) { return true, refused })
	if err != refused || requests.Load() != 1 {
		t.Errorf("visit's error: %v after %d requests", err, requests.Load())
	}

	c, requests = endlessListing(t)
	broken := errors.New("the page names no next start")
	err = providerapi.Pages(context.Background(), c.Do, first, 0, func(*providerapi.Answer) (string, error) { return "", broken },
		func(*providerapi.Answer) (bool, error) { return true, nil })
	if err != broken || requests.Load() != 1 {
		t.Errorf("the page rule's error: %v after %d requests", err, requests.Load())
	}
}
