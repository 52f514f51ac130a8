package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/functions/wiring"
)

// runSign prints a ready curl command that sends a correctly signed webhook to a route, or,
// with -send, sends it and prints the answer.
func runSign(args []string, out io.Writer) error {
	fs := newCommand("sign", "[-config FILE] [-route NAME] [-url URL] [-title T] [-body FILE] [-send]",
		"Signs a sample webhook (a push, or with -title a pull request) for a route with the route's secret, as\n"+
			"its provider would, and prints the curl command that sends it; with -send, sends it and prints the answer.\n"+
			"The secret is read as amiss serve reads it: sign with the value the server checks.")
	cfgPath := fs.String("config", defaultConfig, "configuration file")
	route := fs.String("route", "demo", "route to send to")
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of amiss serve")
	file := fs.String("body", "", "file holding the payload (default: a sample push for the route)")
	title := fs.String("title", "", "send a pull request with this title instead of a push")
	send := fs.Bool("send", false, "send the webhook and print the answer, instead of printing a curl command")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, os.Getenv)
	if err != nil {
		return err
	}
	r := cfg.Route(*route)
	if r == nil {
		return fs.usagef("-route %q: %s configures no such route (routes: %s)", *route, *cfgPath, strings.Join(cfg.RouteNames(), ", "))
	}
	src := wiring.Secrets(nil)
	secret, err := src.Get(context.Background(), r.Secrets[0].From)
	if err != nil {
		use := config.SecretUse{Path: fmt.Sprintf("routes.%s.secrets[0].from", r.Name), Route: r.Name,
			What: "webhook secret " + r.Secrets[0].ID, From: r.Secrets[0].From}
		if rerr := wiring.ResolveSecret(context.Background(), src, use); rerr != nil {
			err = rerr // the same failure, with the field, the source and the remedy
		}
		hint := "amiss sign must sign with the value the server checks"
		if use.From == "env:"+demoSecretVar {
			hint += " (make run and make sign export the example's " + demoSecretVar + "; the README shows the export)"
		}
		return fmt.Errorf("cannot sign: %w; %s", err, hint)
	}
	var body []byte
	if *file != "" {
		if body, err = os.ReadFile(*file); err != nil {
			return err
		}
	} else {
		body = samplePayload(r, *title)
	}
	headers, err := signedHeaders(r, secret, body, *title != "")
	if err != nil {
		return err
	}
	target := strings.TrimRight(*url, "/") + "/hooks/" + *route
	if *send {
		return sendSigned(target, headers, body, out)
	}
	fmt.Fprintf(out, "curl -sS -X POST %s \\\n", target)
	for _, h := range headers {
		fmt.Fprintf(out, "  -H '%s' \\\n", h)
	}
	fmt.Fprintf(out, "  --data-binary '%s'\n", strings.ReplaceAll(string(body), "'", `'\''`))
	return nil
}

// sendSigned posts the webhook and prints the answer's status and body. A server that is not
// there is explained, with the command that starts it.
func sendSigned(target string, headers []string, body []byte, out io.Writer) error {
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		base, _, _ := strings.Cut(target, "/hooks/")
		return fmt.Errorf("nothing answers at %s: start the server first (make run, in another terminal), or point -url at it: %w", base, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Fprintf(out, "HTTP %d %s\n", resp.StatusCode, strings.TrimSpace(string(answer)))
	return nil
}

// sampleRepository is a repository the route may publish for.
func sampleRepository(r *config.Route) string {
	return strings.Replace(r.Repositories[0], "/*", "/app", 1)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// samplePayload is a push (or pull request) in the shape the route's provider sends.
func samplePayload(r *config.Route, title string) []byte {
	repo, sha := sampleRepository(r), randomHex(20)
	if r.Provider == provider.StandardWebhooks {
		if title != "" {
			return fmt.Appendf(nil, `{"type":"pull_request","data":{"repository":%q,"sha":%q,"ref":"refs/heads/feature","pull_request":{"number":1,"title":%q,"target_branch":"main","source_branch":"feature"},"commits":[{"id":%q,"message":"Add the thing"}],"changed_paths":["src/thing.go"]}}`,
				repo, sha, title, sha)
		}
		return fmt.Appendf(nil, `{"type":"push","data":{"repository":%q,"sha":%q,"ref":"refs/heads/main","commits":[{"id":%q,"message":"Update the README"}],"changed_paths":["README.md"]}}`,
			repo, sha, sha)
	}
	if title != "" {
		return fmt.Appendf(nil, `{"action":"opened","number":1,"repository":{"full_name":%q},"pull_request":{"title":%q,"head":{"sha":%q,"ref":"feature"},"base":{"ref":"main"}}}`,
			repo, title, sha)
	}
	return fmt.Appendf(nil, `{"ref":"refs/heads/main","after":%q,"repository":{"full_name":%q},"commits":[{"id":%q,"message":"Update the README","added":[],"removed":[],"modified":["README.md"]}]}`,
		sha, repo, sha)
}

func hexMAC(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// signedHeaders returns the headers the route's scheme checks, signed with secret.
func signedHeaders(r *config.Route, secret string, body []byte, pull bool) ([]string, error) {
	event := "push"
	if pull {
		event = "pull_request"
	}
	h := []string{"Content-Type: application/json"}
	switch r.Scheme {
	case webhook.SchemeGitHub:
		return append(h, "X-GitHub-Event: "+event, "X-Hub-Signature-256: sha256="+hexMAC(secret, body)), nil
	case webhook.SchemeGitea:
		return append(h, "X-Gitea-Event: "+event, "X-Gitea-Signature: "+hexMAC(secret, body)), nil
	case webhook.SchemeForgejo:
		return append(h, "X-Forgejo-Event: "+event, "X-Forgejo-Signature: "+hexMAC(secret, body)), nil
	case webhook.SchemeBitbucket:
		key := "repo:push"
		if pull {
			key = "pullrequest:created"
		}
		return append(h, "X-Event-Key: "+key, "X-Hub-Signature: sha256="+hexMAC(secret, body)), nil
	case webhook.SchemeGitLabToken:
		return append(h, "X-Gitlab-Event: Push Hook", "X-Gitlab-Token: "+secret), nil
	case webhook.SchemeStandardWebhooks, webhook.SchemeGitLabSigning:
		id, now := "msg_"+randomHex(12), time.Now()
		sig, err := webhook.Sign(secret, id, now, body)
		if err != nil {
			return nil, err
		}
		return append(h, "webhook-id: "+id, fmt.Sprintf("webhook-timestamp: %d", now.Unix()), "webhook-signature: "+sig), nil
	}
	return nil, fmt.Errorf("amiss sign does not know scheme %s", r.Scheme)
}
