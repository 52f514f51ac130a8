package bitbucketdc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc"
)

// Bitbucket Data Center pages by start and limit: each page says whether it is the last, and
// where the next starts (nextPageStart), which the next request asks for.
func TestBitbucketDataCenterListingsFollowNextPageStart(t *testing.T) {
	const items = 57
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer dc" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		start, _ := strconv.Atoi(r.URL.Query().Get("start"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		end := min(start+limit, items)
		values := []int{}
		for i := start; i < end; i++ {
			values = append(values, i)
		}
		v, _ := json.Marshal(values)
		last := end >= items
		fmt.Fprintf(w, `{"size":%d,"limit":%d,"start":%d,"isLastPage":%v,"values":%s`, len(values), limit, start, last, v)
		if !last {
			fmt.Fprintf(w, `,"nextPageStart":%d`, end)
		}
		w.Write([]byte("}"))
	}))
	defer srv.Close()
	path, err := bitbucketdc.RepoPath("PROJ/repo")
	if err != nil {
		t.Fatal(err)
	}
	c := bitbucketdc.NewClient(srv.URL, "dc", srv.Client())
	var got []int
	err = c.Pages(context.Background(), providerapi.Request{Method: http.MethodGet, URL: path + "/commits?limit=25"}, 0, func(values json.RawMessage, _ bool) (bool, error) {
		var page []int
		err := json.Unmarshal(values, &page)
		got = append(got, page...)
		return true, err
	})
	if err != nil || len(got) != items || got[items-1] != items-1 {
		t.Fatalf("read %d of %d: %v", len(got), items, err)
	}
	if err := c.Pages(context.Background(), providerapi.Request{Method: http.MethodGet, URL: path + "/commits?limit=25"}, 2,
		func(json.RawMessage, bool) (bool, error) { return true, nil }); providerapi.ClassOf(err) != providerapi.Transient {
		t.Fatalf("a listing past its bound: %v", err)
	}
}
