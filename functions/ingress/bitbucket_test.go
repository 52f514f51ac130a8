package ingress_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

const bitbucketConfig = `
routes:
  cloud:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["team/*", "PROJ/*"]
    publish: {provider: bitbucket, base_url: "https://api.bitbucket.org", token: {from: "env:T"}}
  dc:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["team/*", "PROJ/*"]
    publish: {provider: bitbucket-datacenter, base_url: "https://bitbucket.example", token: {from: "env:T"}}
  logged:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    repositories: ["team/*", "PROJ/*"]
  pulls:
    provider: bitbucket
    secrets: [{id: k1, from: "env:GH"}]
    events: [pull_request]
    repositories: ["team/*", "PROJ/*"]
`

// bitbucketRequest signs body as Bitbucket does, for route, with the event key.
func bitbucketRequest(route, event, body string) events.APIGatewayV2HTTPRequest {
	m := hmac.New(sha256.New, []byte(ghSecret))
	m.Write([]byte(body))
	req := events.APIGatewayV2HTTPRequest{RawPath: "/hooks/" + route, PathParameters: map[string]string{"route": route},
		Headers: map[string]string{"x-event-key": event, "x-hub-signature": "sha256=" + hex.EncodeToString(m.Sum(nil))}, Body: body}
	req.RequestContext.HTTP.Method = http.MethodPost
	return req
}

// A route that publishes to Bitbucket Cloud takes no webhook of a Bitbucket Data Center server,
// and back: the sender is told which field to set, and nothing is admitted, so no verdict is
// posted to (and no input read from) an API that does not hold the repository. A route that
// publishes to the log takes both.
func TestABitbucketWebhookFromTheOtherAPIIsRefusedNamingTheFix(t *testing.T) {
	h, _ := newBitbucketHandler(t, queue.NewLocal())
	cloudPush := fmt.Sprintf(`{"repository":{"full_name":"team/app"},"push":{"changes":[{"new":{"type":"branch","name":"main",`+
		`"target":{"hash":%q}},"old":null,"commits":[],"truncated":false}]}}`, sha1)
	dcPush := fmt.Sprintf(`{"eventKey":"repo:refs_changed","repository":{"slug":"app","project":{"key":"PROJ"}},`+
		`"changes":[{"ref":{"id":"refs/heads/main","type":"BRANCH"},"fromHash":%q,"toHash":%q,"type":"UPDATE"}]}`, strings.Repeat("1", 40), sha1)
	cases := []struct {
		route, event, body string
		status             int
		message            string
	}{
		{"cloud", "repo:push", cloudPush, http.StatusAccepted, ""},
		{"cloud", "repo:refs_changed", dcPush, http.StatusForbidden, "a Bitbucket Data Center server, and the route's publish.provider is bitbucket: set it to bitbucket-datacenter"},
		{"dc", "repo:refs_changed", dcPush, http.StatusAccepted, ""},
		{"dc", "repo:push", cloudPush, http.StatusForbidden, "Bitbucket Cloud, and the route's publish.provider is bitbucket-datacenter: set it to bitbucket"},
		{"logged", "repo:push", cloudPush, http.StatusAccepted, ""},
		{"logged", "repo:refs_changed", dcPush, http.StatusAccepted, ""},
	}
	for _, c := range cases {
		resp, err := h.Handle(context.Background(), bitbucketRequest(c.route, c.event, c.body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Outcome, Message string }
		json.Unmarshal([]byte(resp.Body), &r)
		if resp.StatusCode != c.status || !strings.Contains(r.Message, c.message) {
			t.Errorf("%s %s: %d %s, want %d naming %q", c.route, c.event, resp.StatusCode, resp.Body, c.status, c.message)
		}
	}
}

// newBitbucketHandler is an ingress of bitbucketConfig's routes over a new FileLedger, handing
// keys to q.
func newBitbucketHandler(t *testing.T, q queue.Queue) (*ingress.Handler, *localfs.Ledger) {
	t.Helper()
	return newHandler(t, bitbucketConfig, q, slog.New(slog.DiscardHandler))
}

// cloudPushOf is a Bitbucket Cloud push to team/app updating each branch to its commit: names
// and commits alternate.
func cloudPushOf(branchAndCommit ...string) string {
	var changes []string
	for i := 0; i+1 < len(branchAndCommit); i += 2 {
		changes = append(changes, fmt.Sprintf(`{"new":{"type":"branch","name":%q,"target":{"hash":%q}},"old":null,"commits":[],"truncated":false}`,
			branchAndCommit[i], branchAndCommit[i+1]))
	}
	return `{"repository":{"full_name":"team/app"},"push":{"changes":[` + strings.Join(changes, ",") + `]}}`
}

// pushAnswer is the answer to a push: its outcome and each branch's.
type pushAnswer struct {
	Outcome, Key, Message string
	Branches              []struct{ Ref, Outcome, Key string }
}

func decodeAnswer(t *testing.T, resp events.APIGatewayV2HTTPResponse) pushAnswer {
	t.Helper()
	var a pushAnswer
	if err := json.Unmarshal([]byte(resp.Body), &a); err != nil {
		t.Fatalf("answer %q: %v", resp.Body, err)
	}
	return a
}

// A Bitbucket push that updates two branches is one webhook: each branch is admitted and queued
// as a delivery of its own, holding that branch's change, and the answer lists both. Sent
// again, it finds the same two deliveries (queued again, none added). The first branch's key is
// the one the webhook's own identity gives, as a push of one branch has always had.
func TestAPushOfTwoBranchesIsAdmittedOncePerBranch(t *testing.T) {
	q := queue.NewLocal()
	h, l := newBitbucketHandler(t, q)
	sha2 := strings.Repeat("2", 40)
	body := cloudPushOf("main", sha1, "release/1.1", sha2)
	resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
	if err != nil {
		t.Fatal(err)
	}
	a := decodeAnswer(t, resp)
	if resp.StatusCode != http.StatusAccepted || a.Outcome != "admitted" || len(a.Branches) != 2 {
		t.Fatalf("answered %d %s, want 202 admitted listing two branches", resp.StatusCode, resp.Body)
	}
	want := map[string]string{"refs/heads/main": sha1, "refs/heads/release/1.1": sha2}
	keys := map[string]bool{}
	for _, b := range a.Branches {
		k, err := ledger.ParseKey(b.Key)
		if err != nil || b.Outcome != "admitted" {
			t.Fatalf("branch %s answered %s, key %q (%v)", b.Ref, b.Outcome, b.Key, err)
		}
		row, err := l.Inspect(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		var c change.Change
		if err := json.Unmarshal(row.Change, &c); err != nil || c.Ref != b.Ref || c.SHA != want[b.Ref] {
			t.Errorf("branch %s's delivery holds %s at %s (%v), want %s", b.Ref, c.Ref, c.SHA, err, want[b.Ref])
		}
		keys[b.Key] = true
	}
	if len(keys) != 2 || q.Len() != 2 {
		t.Fatalf("%d distinct keys, %d queued; want 2 and 2", len(keys), q.Len())
	}
	first := ledger.NewKey("cloud", webhook.SchemeBitbucket, ledger.SumBody([]byte(body)).String())
	if a.Branches[0].Key != first.String() {
		t.Errorf("the first branch's key is %s, want the webhook's own %s", a.Branches[0].Key, first)
	}

	resp, err = h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
	if err != nil {
		t.Fatal(err)
	}
	again := decodeAnswer(t, resp)
	if resp.StatusCode != http.StatusOK || again.Outcome != "pending" || len(again.Branches) != 2 || q.Len() != 2 {
		t.Fatalf("sent again: %d %s, %d queued; want 200 pending for both, still 2 queued", resp.StatusCode, resp.Body, q.Len())
	}
	for i, b := range again.Branches {
		if b.Key != a.Branches[i].Key || b.Outcome != "pending" {
			t.Errorf("sent again, branch %s is %s under %s, want pending under %s", b.Ref, b.Outcome, b.Key, a.Branches[i].Key)
		}
	}
}

// A push whose second branch could not be queued is answered 503, and loses nothing: sent
// again, as a sender retries, both branches are queued.
func TestAPushOfTwoBranchesQueuedHalfIsQueuedWholeWhenSentAgain(t *testing.T) {
	q := &failingNth{Local: queue.NewLocal(), fail: 2}
	h, _ := newBitbucketHandler(t, q)
	body := cloudPushOf("main", sha1, "release/1.1", strings.Repeat("2", 40))
	resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || q.Len() != 1 {
		t.Fatalf("with the second send failing: %d %s, %d queued; want 503 and 1 queued", resp.StatusCode, resp.Body, q.Len())
	}
	resp, err = h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
	if err != nil {
		t.Fatal(err)
	}
	if a := decodeAnswer(t, resp); resp.StatusCode != http.StatusOK || a.Outcome != "pending" || q.Len() != 2 {
		t.Fatalf("sent again: %d %s, %d queued; want 200 pending, 2 queued", resp.StatusCode, resp.Body, q.Len())
	}
}

// failingNth is a local queue whose fail-th send fails.
type failingNth struct {
	*queue.Local
	fail, sent int
}

func (q *failingNth) Send(ctx context.Context, m queue.Message) error {
	q.sent++
	if q.sent == q.fail {
		return errors.New("queue down")
	}
	return q.Local.Send(ctx, m)
}

// A push of more branches than one webhook's are evaluated is refused whole, naming the bound
// and what to do: nothing is admitted, so no branch gets a verdict that saw less than its push.
func TestAPushOfTooManyBranchesIsRefusedWhole(t *testing.T) {
	q := queue.NewLocal()
	h, _ := newBitbucketHandler(t, q)
	many := branchesAt(change.MaxBranches+1, sha1)
	for _, c := range []struct {
		body    string
		status  int
		message string
	}{
		{cloudPushOf(many...), http.StatusRequestEntityTooLarge, fmt.Sprintf("a push updating %d branches; amiss evaluates at most %d from one webhook (push fewer at once)", change.MaxBranches+1, change.MaxBranches)},
	} {
		resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", c.body))
		if err != nil {
			t.Fatal(err)
		}
		if a := decodeAnswer(t, resp); resp.StatusCode != c.status || !strings.Contains(a.Message, c.message) {
			t.Errorf("%d %s, want %d naming %q", resp.StatusCode, resp.Body, c.status, c.message)
		}
	}
	if q.Len() != 0 {
		t.Errorf("%d queued, want none", q.Len())
	}
	resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", cloudPushOf(branchesAt(change.MaxBranches, sha1)...)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted || q.Len() != change.MaxBranches {
		t.Errorf("a push of %d branches: %d, %d queued; want 202 and %d", change.MaxBranches, resp.StatusCode, q.Len(), change.MaxBranches)
	}
}

// A push of more branches than are evaluated is answered as the route answers any push before
// it is counted: ignored (204) by a route that evaluates no push, refused (403) by a route that
// may not publish for the repository or takes no webhook of that Bitbucket product, naming
// the fix. Only a push the route would evaluate is refused for its count (413).
func TestAPushOfTooManyBranchesIsAnsweredAsTheRouteAnswersAnyPush(t *testing.T) {
	q := queue.NewLocal()
	h, _ := newBitbucketHandler(t, q)
	many := branchesAt(change.MaxBranches+1, sha1)
	push := cloudPushOf(many...)
	for _, c := range []struct {
		route, body string
		status      int
		outcome     string
		names       string // what the message names
	}{
		{"pulls", push, http.StatusNoContent, "ignored", ""},
		{"dc", push, http.StatusForbidden, "forbidden", "publish.provider"},
		{"cloud", strings.Replace(push, "team/app", "elsewhere/app", 1), http.StatusForbidden, "forbidden", "may not publish for this repository"},
		{"cloud", push, http.StatusRequestEntityTooLarge, "too-large", "push fewer at once"},
	} {
		resp, err := h.Handle(context.Background(), bitbucketRequest(c.route, "repo:push", c.body))
		if err != nil {
			t.Fatal(err)
		}
		a := pushAnswer{Outcome: "ignored"}
		if resp.StatusCode != http.StatusNoContent {
			a = decodeAnswer(t, resp)
		}
		if resp.StatusCode != c.status || a.Outcome != c.outcome || !strings.Contains(a.Message, c.names) {
			t.Errorf("route %s: %d %s, want %d %s naming %q", c.route, resp.StatusCode, resp.Body, c.status, c.outcome, c.names)
		}
	}
	if q.Len() != 0 {
		t.Errorf("%d queued, want none", q.Len())
	}
}

// A push whose admissions fail part way (the ledger unavailable before or after its write
// landed, or full) is answered 503 with Retry-After, nothing claimed for the branches not
// admitted; sent again, as a sender retries, every branch is admitted and queued, each once,
// under its own key and holding its own change.
func TestAPushOfBranchesAdmittedPartWayIsAdmittedWholeWhenSentAgain(t *testing.T) {
	sha2, sha3 := strings.Repeat("2", 40), strings.Repeat("3", 40)
	body := cloudPushOf("main", sha1, "release/1.1", sha2, "fix", sha3)
	want := map[string]string{"refs/heads/main": sha1, "refs/heads/release/1.1": sha2, "refs/heads/fix": sha3}
	for _, c := range []struct {
		name     string
		fail     failure
		answered []string // each branch's outcome when sent again
	}{
		{"the ledger unavailable", failBefore, []string{"pending", "admitted", "admitted"}},
		{"the ledger's write landed unanswered", failAfter, []string{"pending", "pending", "admitted"}},
		{"the ledger full", failFull, []string{"pending", "admitted", "admitted"}},
	} {
		q := queue.NewLocal()
		h, l := newBitbucketHandler(t, q)
		fl := &failingAdmit{Ledger: l, fail: 2, how: c.fail}
		h.Ledger = fl
		resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Headers["Retry-After"] == "" || q.Len() != 1 {
			t.Fatalf("%s: %d %v %s, %d queued; want 503 with Retry-After, the first branch queued", c.name, resp.StatusCode, resp.Headers, resp.Body, q.Len())
		}
		resp, err = h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
		if err != nil {
			t.Fatal(err)
		}
		a := decodeAnswer(t, resp)
		if resp.StatusCode != http.StatusAccepted || a.Outcome != "admitted" || len(a.Branches) != 3 || q.Len() != 3 {
			t.Fatalf("%s, sent again: %d %s, %d queued; want 202 admitted listing three branches, three queued", c.name, resp.StatusCode, resp.Body, q.Len())
		}
		for i, b := range a.Branches {
			k, err := ledger.ParseKey(b.Key)
			if err != nil {
				t.Fatalf("%s: branch %s's key %q: %v", c.name, b.Ref, b.Key, err)
			}
			row, err := l.Inspect(context.Background(), k)
			if err != nil {
				t.Fatalf("%s: branch %s: %v", c.name, b.Ref, err)
			}
			var ch change.Change
			if err := json.Unmarshal(row.Change, &ch); err != nil || b.Outcome != c.answered[i] || ch.Ref != b.Ref || ch.SHA != want[b.Ref] {
				t.Errorf("%s: branch %s answered %s (want %s), its row holds %s at %s (%v)", c.name, b.Ref, b.Outcome, c.answered[i], ch.Ref, ch.SHA, err)
			}
		}
		if st, err := l.Stats(context.Background()); err != nil || st.Rows != 3 {
			t.Errorf("%s: %d rows (%v), want 3", c.name, st.Rows, err)
		}
	}
}

// failure is how failingAdmit's admission fails.
type failure int

const (
	failBefore failure = iota // an error, nothing written
	failAfter                 // an error, the row written
	failFull                  // Full
	failStale                 // Stale: the accepted window closed
)

// failingAdmit is a ledger whose fail-th admission fails as how says.
type failingAdmit struct {
	ledger.Ledger
	fail, admits int
	how          failure
}

func (l *failingAdmit) Admit(ctx context.Context, d ledger.Delivery) (ledger.Admission, error) {
	l.admits++
	if l.admits != l.fail {
		return l.Ledger.Admit(ctx, d)
	}
	switch l.how {
	case failAfter:
		if _, err := l.Ledger.Admit(ctx, d); err != nil {
			return ledger.Admission{}, err
		}
		return ledger.Admission{}, errors.New("ledger: the answer was lost")
	case failStale:
		return ledger.Admission{Outcome: ledger.Stale, Key: d.Key()}, nil
	case failFull:
		return ledger.Admission{Outcome: ledger.Full, Key: d.Key()}, nil
	}
	return ledger.Admission{}, errors.New("ledger unavailable")
}

// What a push lists beyond its branches, and what its branches are named, changes nothing of
// the above: deletions and tags beside 20 branches are not counted (each branch admitted), a
// name with spaces, quotes, markup or non-ASCII letters, or a long one, is kept as it is under
// a key of its own, and a branch whose change is over the ledger's limit refuses the whole push
// (413) before any branch is admitted.
func TestAPushOfOddBranchesIsAdmittedWholeOrRefusedWhole(t *testing.T) {
	withOthers := strings.Replace(cloudPushOf(branchesAt(change.MaxBranches, sha1)...), `"changes":[`, `"changes":[`+
		`{"new":null,"old":{"type":"branch","name":"gone","target":{"hash":"`+sha1+`"}},"commits":[],"truncated":false},`+
		`{"new":{"type":"tag","name":"v1","target":{"hash":"`+sha1+`"}},"old":null,"commits":[],"truncated":false},`, 1)
	withOthers = strings.Replace(withOthers, `]}}`, `,{"new":{"type":"tag","name":"v2","target":{"hash":"`+sha1+`"}},"old":null,"commits":[],"truncated":false}]}}`, 1)
	odd := []string{"main", "with space", `a "quoted" <b>&amp;</b>`, "snow\u2603man", strings.Repeat("long/", 400)}
	var oddPush []string
	for _, n := range odd {
		oddPush = append(oddPush, n, sha1)
	}
	for _, c := range []struct {
		name, body string
		status     int
		refs       []string // the branches admitted, in order
	}{
		{"20 branches, a deletion and two tags", withOthers, http.StatusAccepted, func() (r []string) {
			for i := range change.MaxBranches {
				r = append(r, fmt.Sprintf("refs/heads/b%d", i))
			}
			return r
		}()},
		{"odd names", cloudPushOf(oddPush...), http.StatusAccepted, func() (r []string) {
			for _, n := range odd {
				r = append(r, "refs/heads/"+n)
			}
			return r
		}()},
		{"a name over the limit", cloudPushOf("main", sha1, strings.Repeat("x", 40<<10), sha1), http.StatusRequestEntityTooLarge, nil},
	} {
		q := queue.NewLocal()
		h, l := newBitbucketHandler(t, q)
		resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", c.body))
		if err != nil {
			t.Fatal(err)
		}
		a := decodeAnswer(t, resp)
		if resp.StatusCode != c.status || len(a.Branches) != len(c.refs) || q.Len() != len(c.refs) {
			t.Fatalf("%s: %d, %d branches answered, %d queued; want %d and %d", c.name, resp.StatusCode, len(a.Branches), q.Len(), c.status, len(c.refs))
		}
		for i, b := range a.Branches {
			k, err := ledger.ParseKey(b.Key)
			if err != nil {
				t.Fatalf("%s: %q: %v", c.name, b.Key, err)
			}
			row, err := l.Inspect(context.Background(), k)
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, b.Ref, err)
			}
			var ch change.Change
			if err := json.Unmarshal(row.Change, &ch); err != nil || b.Ref != c.refs[i] || ch.Ref != c.refs[i] {
				t.Errorf("%s: branch %d answered as %q, its row holds %q (%v); want %q", c.name, i, b.Ref, ch.Ref, err, c.refs[i])
			}
		}
		if st, err := l.Stats(context.Background()); err != nil || int(st.Rows) != len(c.refs) {
			t.Errorf("%s: %d rows (%v), want %d", c.name, st.Rows, err, len(c.refs))
		}
	}
}

// Branch names that JSON decoding cannot keep apart (bytes that are not UTF-8, which git allows
// in a name, all read as U+FFFD) are still branches of their own: each is admitted under a key
// of its own, and the rest of the push with them.
func TestBranchesWhoseNamesReadAlikeAreEachAdmitted(t *testing.T) {
	q := queue.NewLocal()
	h, _ := newBitbucketHandler(t, q)
	body := cloudPushOf("main", sha1, "cafA", strings.Repeat("2", 40), "cafB", strings.Repeat("3", 40))
	body = strings.NewReplacer("cafA", "caf\xe9", "cafB", "caf\xe8").Replace(body) // raw bytes, as in a name git allows
	resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", body))
	if err != nil {
		t.Fatal(err)
	}
	a := decodeAnswer(t, resp)
	keys := map[string]bool{}
	for _, b := range a.Branches {
		keys[b.Key] = true
	}
	if resp.StatusCode != http.StatusAccepted || len(a.Branches) != 3 || len(keys) != 3 || q.Len() != 3 {
		t.Fatalf("%d %s, %d queued; want 202 with three branches under three keys, three queued", resp.StatusCode, resp.Body, q.Len())
	}
}

// branchesAt names n branches (b0, b1, ...) and their commit, sha, as cloudPushOf takes them.
func branchesAt(n int, sha string) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("b%d", i), sha)
	}
	return out
}

// A push whose accepted window closes between two branches' admissions (its time at the edge
// of the window, or store nodes whose clocks disagree) is answered stale for the branch that
// found it closed and those after, and says which branches before it were taken: those are
// queued and evaluated.
func TestAPushWhoseWindowClosesPartWaySaysWhatWasTaken(t *testing.T) {
	q := queue.NewLocal()
	h, l := newBitbucketHandler(t, q)
	h.Ledger = &failingAdmit{Ledger: l, fail: 2, how: failStale}
	resp, err := h.Handle(context.Background(), bitbucketRequest("cloud", "repo:push", cloudPushOf("main", sha1, "release/1.1", strings.Repeat("2", 40))))
	if err != nil {
		t.Fatal(err)
	}
	a := decodeAnswer(t, resp)
	if resp.StatusCode != http.StatusUnauthorized || a.Outcome != "stale" || q.Len() != 1 ||
		!strings.Contains(a.Message, "refs/heads/release/1.1 and the branches after it are not evaluated; those before it were taken (listed)") ||
		len(a.Branches) != 1 || a.Branches[0].Ref != "refs/heads/main" || a.Branches[0].Outcome != "admitted" {
		t.Fatalf("%d %s, %d queued; want 401 stale naming the branch refused and listing refs/heads/main admitted, 1 queued", resp.StatusCode, resp.Body, q.Len())
	}
}
