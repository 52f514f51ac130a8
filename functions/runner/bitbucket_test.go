package runner_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket/bitbuckettest"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucketdc/bitbucketdctest"
	"github.com/amiss-ci/amiss/functions/providerapi/providerapitest"
	"github.com/amiss-ci/amiss/functions/publish"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// Bitbucket's webhooks name no changed path, Bitbucket Cloud's pull requests no commit and
// Data Center's pushes no commit either: a route's rules see them through the API, read as
// the route is wired (the provider table's reader, at the publisher's API and token), and the
// verdict is posted as a build status to the commit, on a fake of each API that checks every
// request against Atlassian's published description. The deliveries are the providers'
// webhook fixtures, read as the ingress reads them.

// The commits of the fixtures: Cloud's push moves team/app's main from cloudBefore to
// cloudHead (listing both its commits), its pull request 42 brings fix-window (cloudPull,
// abbreviated to 12 characters in the webhook) to main; Data Center's push moves
// PROJ/repository's master from dcBefore to dcHead, its pull request 1 brings a-branch
// (dcPull) to master.
const (
	cloudBefore = "1e65c05c1d5171631d92438a13901ca7dae9618c"
	cloudMiddle = "03f4a7270240708834de475bcf21532d6134777e"
	cloudHead   = "709d658dc5b6d6afcd46049c2f332ee3f515a67d"
	cloudPull   = "a3b0c7e1d2f45b6c7d8e9f001122334455667788"
	dcBefore    = "ecddabb624f6f5ba43816f5926e580a5f680a932"
	dcHead      = "178864a7d521b6f5e720b386b2c2b0ef8563e0dc"
	dcPull      = "ef8755f06ee4b28c96a847a95cb8ec8ed6ddd1ca"
	bbContext   = "amiss/verdict"
)

// bitbucketRules: no secrets, capitalised commit messages.
var bitbucketRules = config.Rules{ForbiddenPaths: []string{"secrets/**"}, CommitMessage: "^[A-Z]"}

// history is what the fixtures' commits change: the push's head and the pull request's head,
// with the pull request's head commit's message.
type history struct {
	push, pull []string // paths added
	message    string   // the pull request's head commit's
}

// bitbucketWorld is a FileLedger on a manual clock and a fake of Bitbucket Cloud or of a Data
// Center server holding the fixtures' history.
type bitbucketWorld struct {
	t     *testing.T
	l     ledger.Ledger
	clock *ledger.ManualClock
	dc    bool
	cloud *bitbuckettest.Bitbucket
	srvr  *bitbucketdctest.BitbucketDC
	srv   *httptest.Server
}

func newBitbucketWorld(t *testing.T, dc bool, h history) *bitbucketWorld {
	t.Helper()
	w := &bitbucketWorld{t: t, clock: ledger.NewManualClock(epoch), dc: dc}
	l, err := localfs.Open(context.Background(), filepath.Join(t.TempDir(), "root"), localfs.Config{Limits: ledger.DefaultLimits(),
		Clock: w.clock, Create: true, FS: unsyncedFS{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	w.l = l
	if h.message == "" {
		h.message = "Close the window\n"
	}
	var handler http.Handler
	if dc {
		w.srvr = bitbucketdctest.New(func(tok string) bool { return tok == "dc_token" })
		const repo = "PROJ/repository"
		add := func(id, parent, message string, paths []string) {
			c := bitbucketdctest.Commit{ID: id, Message: message}
			if parent != "" {
				c.Parents = []string{parent}
			}
			for _, p := range paths {
				c.Changes = append(c.Changes, bitbucketdctest.Change{Path: p, Type: "ADD"})
			}
			w.srvr.AddCommit(repo, c)
		}
		add(dcBefore, "", "Initial\n", []string{"README.md"})
		add(dcHead, dcBefore, "Add the health check\n", append([]string{"src/health.go"}, h.push...))
		add(dcPull, dcHead, h.message, append([]string{"src/window.go"}, h.pull...))
		w.srvr.SetDefaultBranch(repo, "master")
		w.srvr.SetBranch(repo, "master", dcHead)
		w.srvr.SetBranch(repo, "a-branch", dcPull)
		w.srvr.AddPull(repo, bitbucketdctest.Pull{ID: 1, Title: "feat: a new file added", FromBranch: "a-branch", ToBranch: "master",
			FromCommit: dcPull, ToCommit: dcHead})
		handler = w.srvr
	} else {
		w.cloud = bitbuckettest.New(func(tok string) bool { return tok == "bb_token" })
		const repo = "team/app"
		add := func(hash, parent, message string, paths []string) {
			c := bitbuckettest.Commit{Hash: hash, Message: message}
			if parent != "" {
				c.Parents = []string{parent}
			}
			for _, p := range paths {
				c.Changes = append(c.Changes, bitbuckettest.Change{Path: p, Status: "added"})
			}
			w.cloud.AddHistory(repo, c)
		}
		add(cloudBefore, "", "Initial\n", []string{"README.md"})
		add(cloudMiddle, cloudBefore, "Prepare the router\n", []string{"src/router.go"})
		add(cloudHead, cloudMiddle, "Add the health check\n", append([]string{"src/health.go"}, h.push...))
		add(cloudPull, cloudHead, h.message, append([]string{"src/window.go"}, h.pull...))
		w.cloud.SetBranch(repo, "main", cloudHead)
		w.cloud.SetBranch(repo, "fix-window", cloudPull)
		w.cloud.AddPull(repo, bitbuckettest.Pull{ID: 42, Title: "fix: close the replay window", Source: "fix-window", Destination: "main",
			SourceCommit: cloudPull, DestinationCommit: cloudHead})
		handler = w.cloud
	}
	w.srv = httptest.NewServer(handler)
	t.Cleanup(w.srv.Close)
	t.Cleanup(func() {
		if v := w.violations(); len(v) > 0 {
			t.Errorf("requests Bitbucket refuses: %q", v)
		}
	})
	return w
}

func (w *bitbucketWorld) violations() []string {
	if w.dc {
		return w.srvr.Violations()
	}
	return w.cloud.Violations()
}

// refuseReads makes the fake refuse every read of what the webhooks lack, as it refuses a token
// without the scope or permission: Cloud 403, Data Center 401.
func (w *bitbucketWorld) refuseReads() {
	if w.dc {
		w.srvr.Answer = func(op string, _ int) int {
			if op == bitbucketdctest.OpGetBuild {
				return 0
			}
			return http.StatusUnauthorized
		}
		return
	}
	w.cloud.Answer = func(op string, _ int) int {
		switch op {
		case bitbuckettest.OpGetCommit, bitbuckettest.OpGetStatus: // the publisher's reads
			return 0
		}
		return http.StatusForbidden
	}
}

// runner is a runner over the world's ledger, its route wired as a bitbucket route publishing
// to the fake's API (bitbucket or bitbucket-datacenter) with rules.
func (w *bitbucketWorld) runner(rules config.Rules) *runner.Runner {
	w.t.Helper()
	ev, err := evaluate.NewRules(rules)
	if err != nil {
		w.t.Fatal(err)
	}
	api, token := provider.Bitbucket, "bb_token"
	if w.dc {
		api, token = provider.BitbucketDataCenter, "dc_token"
	}
	hc := *w.srv.Client()
	hc.Timeout = 5 * time.Second
	target := provider.Target{API: api, BaseURL: w.srv.URL, Token: token, Client: &hc}
	to, _ := provider.Publishing(api)
	from, _ := provider.Sender(provider.Bitbucket)
	pub, reader := to.Publisher(target), from.Reader(target)
	noSleep := func(context.Context, time.Duration) error { return nil }
	switch p := pub.(type) {
	case *publish.Bitbucket:
		p.Sleep = noSleep
	case *publish.BitbucketDataCenter:
		p.Sleep = noSleep
	}
	return &runner.Runner{Ledger: w.l, Owner: "a", Lease: 30 * time.Second, RenewEvery: 5 * time.Millisecond,
		RetryDelay: time.Second, Now: w.clock.Now,
		Routes: func(context.Context, string) (*runner.Route, error) {
			return &runner.Route{Evaluator: ev, Publisher: pub, Context: bbContext, Destination: api + " " + w.srv.URL,
				Timeout: 5 * time.Second, Settle: time.Minute, Inputs: reader}, nil
		}}
}

// deliver admits a fixture's webhook (body edited by edit, when given), read as the ingress
// reads it, with the body time at (zero: none), and returns its queue message.
func (w *bitbucketWorld) deliver(event string, at time.Time, edit func(string) string) queue.Message {
	w.t.Helper()
	ms := w.deliverAll(event, at, edit)
	if len(ms) != 1 {
		w.t.Fatalf("the %s webhook gave %d changes, want 1", event, len(ms))
	}
	return ms[0]
}

// deliverAll admits each change of a fixture's webhook (a push's one per branch) as the
// ingress does, and returns their queue messages in the order the webhook lists them.
func (w *bitbucketWorld) deliverAll(event string, at time.Time, edit func(string) string) []queue.Message {
	w.t.Helper()
	file := map[string]string{"repo:push": "bitbucket-cloud/push.json", "pullrequest:created": "bitbucket-cloud/pullrequest_created.json",
		"repo:refs_changed": "bitbucket-dc/refs_changed.json", "pr:opened": "bitbucket-dc/pr_opened.json", "pr:modified": "bitbucket-dc/pr_opened.json"}[event]
	b, err := os.ReadFile(filepath.Join("..", "change", "testdata", file))
	if err != nil {
		w.t.Fatal(err)
	}
	body := string(b)
	if edit != nil {
		body = edit(body)
	}
	h := http.Header{}
	h.Set("X-Event-Key", event)
	cs, err := provider.Extract(provider.Bitbucket, h, []byte(body))
	if err != nil {
		w.t.Fatal(err)
	}
	var ms []queue.Message
	for i, s := range cs {
		if len(s.Paths) != 0 || s.Whole.Has(change.PathsInput) {
			w.t.Fatalf("the %s webhook lists paths: %+v", event, s)
		}
		encoded, _ := json.Marshal(s)
		d := ledger.Delivery{Binding: ledger.Binding{Route: "r", Scheme: "bitbucket-sha256",
			Identity: ingress.ChangeIdentity(ledger.SumBody([]byte(body)).String(), i), BodyDigest: ledger.SumBody([]byte(body))},
			Change: encoded, BodyAt: at}
		if a, err := w.l.Admit(context.Background(), d); err != nil || a.Outcome != ledger.Admitted {
			w.t.Fatalf("admit %s: %+v %v", event, a, err)
		}
		ms = append(ms, queue.Message{Key: d.Key(), Binding: d.Binding.Digest()})
	}
	return ms
}

// process runs m through r until it is done, moving the clock to each retry time.
func (w *bitbucketWorld) process(r *runner.Runner, m queue.Message) {
	w.t.Helper()
	for i := 0; ; i++ {
		if i > 20 {
			w.t.Fatalf("delivery %s not done after 20 attempts", m.Key.Short())
		}
		res, err := r.Process(context.Background(), m)
		if err != nil {
			w.t.Logf("process %s: %v", m.Key.Short(), err)
		}
		if res.Done {
			return
		}
		if res.RetryAt.After(w.clock.Now()) {
			w.clock.Set(res.RetryAt)
		}
	}
}

// shown is the build status the commit shows under the context: its state (SUCCESSFUL,
// FAILED) and description.
func (w *bitbucketWorld) shown(sha string) (state, description string) {
	w.t.Helper()
	if w.dc {
		s, ok := w.srvr.Status("PROJ/repository", sha, bbContext)
		if !ok {
			w.t.Fatalf("no build status on %.12s", sha)
		}
		return s.State, s.Description
	}
	s, ok := w.cloud.Status("team/app", sha, publish.BitbucketKey(bbContext))
	if !ok {
		w.t.Fatalf("no build status on %.12s", sha)
	}
	return s.State, s.Desc
}

// push and pull deliver the product's push and pull request webhooks; pushHead and pullHead
// are the commits they are for.
func (w *bitbucketWorld) push() queue.Message {
	if w.dc {
		return w.deliver("repo:refs_changed", time.Time{}, nil)
	}
	return w.deliver("repo:push", time.Time{}, nil)
}

func (w *bitbucketWorld) pull() queue.Message {
	if w.dc {
		return w.deliver("pr:opened", time.Time{}, nil)
	}
	return w.deliver("pullrequest:created", time.Time{}, nil)
}

func (w *bitbucketWorld) pushHead() string {
	if w.dc {
		return dcHead
	}
	return cloudHead
}

func (w *bitbucketWorld) pullHead() string {
	if w.dc {
		return dcPull
	}
	return cloudPull
}

// For Bitbucket Cloud and for Data Center: a push and a pull request that add a forbidden file
// fail, though no webhook names a file; a pull request with a commit whose message breaks the
// rule fails, though its webhook names no commit; a clean push and a clean pull request
// succeed, every rule seen through the API.
func TestBitbucketRulesSeeWhatOnlyTheAPIShows(t *testing.T) {
	for _, dc := range []bool{false, true} {
		product := map[bool]string{false: "Bitbucket Cloud", true: "Bitbucket Data Center"}[dc]
		for _, c := range []struct {
			name                 string
			h                    history
			push, pull           string // the state each shows
			pushNames, pullNames string // what its description names
		}{
			{"clean", history{}, "SUCCESSFUL", "SUCCESSFUL", "all rules hold", "all rules hold"},
			{"a forbidden file in each", history{push: []string{"secrets/prod.env"}, pull: []string{"secrets/key.pem"}},
				"FAILED", "FAILED", "forbidden path secrets/prod.env", "forbidden path secrets/key.pem"},
			{"a pull request's commit message", history{message: "close the window\n"}, "SUCCESSFUL", "FAILED", "all rules hold",
				"commit message of " + map[bool]string{false: cloudPull, true: dcPull}[dc][:12]},
		} {
			t.Run(product+", "+c.name, func(t *testing.T) {
				w := newBitbucketWorld(t, dc, c.h)
				r := w.runner(bitbucketRules)
				w.process(r, w.push())
				w.process(r, w.pull())
				for _, s := range []struct{ sha, state, names string }{{w.pushHead(), c.push, c.pushNames}, {w.pullHead(), c.pull, c.pullNames}} {
					state, desc := w.shown(s.sha)
					if state != s.state || !strings.Contains(desc, s.names) {
						t.Errorf("%.12s shows %s %q, want %s naming %q", s.sha, state, desc, s.state, s.names)
					}
				}
			})
		}
	}
}

// A push that updates two branches (git push of both, or Data Center's automatic merge into a
// later release branch) is one webhook: each branch's head gets its own verdict, on what that
// branch's push added. The first branch adds a forbidden file; the second, moved on from the
// first's head, adds a commit whose message breaks the rule. Each head fails naming its own
// branch's fault and not the other's: a second branch evaluated from the first's commit before
// would name the forbidden file too, one holding the first's commits would pass.
func TestABitbucketPushOfTwoBranchesGivesEachHeadItsOwnVerdict(t *testing.T) {
	for _, dc := range []bool{false, true} {
		w := newBitbucketWorld(t, dc, history{push: []string{"secrets/prod.env"}, message: "close the window\n"})
		event, second := "repo:push", `{"new": {"type": "branch", "name": "fix-window", "target": {"hash": "`+cloudPull+`"}},
			"old": {"type": "branch", "name": "fix-window", "target": {"hash": "`+cloudHead+`"}},
			"commits": [{"hash": "`+cloudPull+`", "message": "close the window\n"}], "truncated": false}`
		if dc {
			event, second = "repo:refs_changed", `{"ref": {"id": "refs/heads/a-branch", "displayId": "a-branch", "type": "BRANCH"},
				"refId": "refs/heads/a-branch", "fromHash": "`+dcHead+`", "toHash": "`+dcPull+`", "type": "UPDATE"}`
		}
		ms := w.deliverAll(event, time.Time{}, func(b string) string {
			i := strings.LastIndex(b, "]") // the end of the list of changes
			return b[:i] + "," + second + b[i:]
		})
		if len(ms) != 2 {
			t.Fatalf("data center %v: the push of two branches gave %d deliveries, want 2", dc, len(ms))
		}
		r := w.runner(bitbucketRules)
		for _, m := range ms {
			w.process(r, m)
		}
		for _, s := range []struct{ sha, names, not string }{
			{w.pushHead(), "forbidden path secrets/prod.env", "commit message"},
			{w.pullHead(), "commit message of " + w.pullHead()[:12], "secrets/prod.env"}} {
			if state, desc := w.shown(s.sha); state != "FAILED" || !strings.Contains(desc, s.names) || strings.Contains(desc, s.not) {
				t.Errorf("data center %v: %.12s shows %s %q, want FAILED naming %q and not %q", dc, s.sha, state, desc, s.names, s.not)
			}
		}
	}
}

// A read the provider refuses fails the rules closed, and the commit's status names what to
// grant: Bitbucket Cloud's token scope, Data Center's repository permission.
func TestABitbucketReadRefusedFailsClosedNamingWhatToGrant(t *testing.T) {
	for dc, grant := range map[bool]string{false: "grant the token the pullrequest (Pull requests: Read) scope", true: "grant the token REPO_READ"} {
		w := newBitbucketWorld(t, dc, history{})
		w.refuseReads()
		w.process(w.runner(config.Rules{ForbiddenPaths: []string{"secrets/**"}}), w.pull())
		if state, desc := w.shown(w.pullHead()); state != "FAILED" || !strings.Contains(desc, "changed paths (could not be read: "+grant) {
			t.Errorf("data center %v: %s %q, want FAILED naming %q", dc, state, desc, grant)
		}
	}
}

// A Data Center server's verdicts on one commit are ordered and read back like every
// provider's. Delivered in order, the older verdict's posts refused until the newer one is
// stored: retried after the newer stands, the older is superseded, never posted.
func TestADataCenterOlderVerdictRefusedUntilTheNewerStandsIsNeverPostedAfterIt(t *testing.T) {
	w := newBitbucketWorld(t, true, history{})
	var mu sync.Mutex
	newerStored := false
	w.srvr.Post = func(_ int, s bitbucketdctest.Status) providerapitest.Behavior {
		mu.Lock()
		defer mu.Unlock()
		if s.State == "SUCCESSFUL" {
			newerStored = true
		} else if !newerStored {
			return providerapitest.Behavior{Code: http.StatusServiceUnavailable}
		}
		return providerapitest.Behavior{}
	}
	opened, edited := w.titledPulls(epoch.Add(-2*time.Minute), epoch.Add(-time.Minute))
	r := w.runner(config.Rules{PullRequestTitle: "^feat: "})
	if res, _ := r.Process(context.Background(), opened); res.Done {
		t.Fatal("the older verdict was done although every post of it was refused")
	}
	w.process(r, edited)
	w.clock.Advance(time.Hour)
	w.process(r, opened)
	w.wantNewestStanding(opened, edited)
}

// Delivered newest first, no fault at all: the older verdict is superseded, never posted.
func TestADataCenterOlderVerdictDeliveredLastIsSuperseded(t *testing.T) {
	w := newBitbucketWorld(t, true, history{})
	opened, edited := w.titledPulls(epoch.Add(-2*time.Minute), epoch.Add(-time.Minute))
	r := w.runner(config.Rules{PullRequestTitle: "^feat: "})
	w.process(r, edited)
	w.process(r, opened)
	w.wantNewestStanding(opened, edited)
}

// titledPulls admits the Data Center pull request's opening, titled against the route's title
// rule, at openedAt, and its edit, titled by it, at editedAt (the body's date).
func (w *bitbucketWorld) titledPulls(openedAt, editedAt time.Time) (opened, edited queue.Message) {
	opened = w.deliver("pr:opened", openedAt, func(b string) string {
		return strings.Replace(b, `"title": "feat: a new file added"`, `"title": "a new file added"`, 1)
	})
	edited = w.deliver("pr:modified", editedAt, func(b string) string {
		return strings.Replace(b, `"eventKey": "pr:opened"`, `"eventKey": "pr:modified"`, 1)
	})
	return opened, edited
}

// wantNewestStanding checks that the commit shows the newer verdict, stored once and never
// overwritten, and that the older delivery ended superseded by it.
func (w *bitbucketWorld) wantNewestStanding(older, newer queue.Message) {
	w.t.Helper()
	s, ok := w.srvr.Status("PROJ/repository", dcPull, bbContext)
	if !ok || s.State != "SUCCESSFUL" || s.Description != "all rules hold" || s.Updates != 0 {
		w.t.Fatalf("the commit shows %+v (%v), want the newer verdict, stored once", s, ok)
	}
	r, err := w.l.Inspect(context.Background(), older.Key)
	if err != nil || r.State != ledger.StateSuperseded || r.SupersededBy != newer.Key {
		w.t.Fatalf("older delivery: %v superseded by %s (%v), want superseded by %s", r.State, r.SupersededBy.Short(), err, newer.Key.Short())
	}
	if r, err := w.l.Inspect(context.Background(), newer.Key); err != nil || r.State != ledger.StateDone {
		w.t.Fatalf("newer delivery: %v %v, want done", r.State, err)
	}
}
