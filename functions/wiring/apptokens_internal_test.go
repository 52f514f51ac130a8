package wiring

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/amiss-ci/amiss/functions/githubapp"
	"github.com/amiss-ci/amiss/functions/githubapp/githubapptest"
	"github.com/amiss-ci/amiss/functions/publish"
)

// The publishers retry what GitHub's outage refused and report as the operator's what only an
// operator can fix: the App's failures reach them in the publishers' classes.
func TestAppTokenFailuresReachThePublishersInTheirClasses(t *testing.T) {
	key, pem := githubapptest.GenerateKey()
	app := githubapptest.New(42, &key.PublicKey)
	app.Install(7, "acme/app")
	app.Install(8, "acme/other")
	srv := httptest.NewServer(app)
	defer srv.Close()
	tokens, err := githubapp.New(githubapp.Config{BaseURL: srv.URL, AppID: "42", PrivateKey: pem, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	p := publishTokens{tokens}
	ctx := context.Background()

	app.FailNext(1, http.StatusServiceUnavailable)
	if _, err := p.Token(ctx, 7); publish.ClassOf(err) != publish.Transient {
		t.Fatalf("GitHub's 503 on the exchange: %v, class %v; want transient", err, publish.ClassOf(err))
	}
	if tok, err := p.Token(ctx, 7); err != nil || tok == "" {
		t.Fatalf("after the outage: %q, %v", tok, err)
	}
	app.Refuse(8, http.StatusNotFound, "Not Found")
	if _, err := p.Token(ctx, 8); publish.ClassOf(err) != publish.Operator {
		t.Fatalf("a refused installation: %v, class %v; want operator", err, publish.ClassOf(err))
	}
	app.RevokeKey()
	if _, err := p.Token(ctx, 9); publish.ClassOf(err) != publish.Operator {
		t.Fatalf("a revoked key: %v, class %v; want operator", err, publish.ClassOf(err))
	}
}
