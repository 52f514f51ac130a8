package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/functions/change"
	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/functions/providerapi/github/githubtest"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/ledger"
)

// Two runner processes (two handles on one file ledger) publish three verdicts of one commit
// and context, racing: delivered in every order, and each message delivered twice at once (as
// SQS may). Whatever the interleaving, the newest verdict's status is the last one created,
// each verdict is posted at most once (nothing fails, so nothing needs posting again), and
// every delivery ends done or superseded.

// titledRule describes each verdict by the title it judged, so that every verdict's status
// differs from every other's.
var titledRule = evalFunc(func(_ context.Context, s change.Change) (evaluate.Verdict, error) {
	state := "failure"
	if strings.HasPrefix(s.Pull.Title, "feat:") {
		state = "success"
	}
	return evaluate.Verdict{State: state, Description: "title " + s.Pull.Title}, nil
})

// titledRunner is a runner over l posting to the fake GitHub with titledRule.
func (w *commitWorld) titledRunner(owner string, l ledger.Ledger) *runner.Runner {
	r := w.runner(owner, l, 5*time.Second)
	routes := r.Routes
	r.Routes = func(ctx context.Context, name string) (*runner.Route, error) {
		rt, err := routes(ctx, name)
		if rt != nil {
			rt.Evaluator = titledRule
		}
		return rt, err
	}
	return r
}

// stepper moves the ledger's clock only when every worker waits: to the earliest time one
// waits for. Nothing moves the clock while a worker is inside a call, so every grant lasts
// through the post made under it.
type stepper struct {
	mu      sync.Mutex
	clock   *ledger.ManualClock
	active  int
	waiting []stepWait
}

type stepWait struct {
	at   time.Time
	wake chan struct{}
}

func (s *stepper) begin() { s.mu.Lock(); s.active++; s.mu.Unlock() }

func (s *stepper) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	s.step()
}

// until blocks until the clock reaches at.
func (s *stepper) until(at time.Time) {
	s.mu.Lock()
	if !at.After(s.clock.Now()) {
		s.mu.Unlock()
		return
	}
	wake := make(chan struct{})
	s.waiting = append(s.waiting, stepWait{at, wake})
	s.active--
	s.step()
	s.mu.Unlock()
	<-wake
}

func (s *stepper) step() {
	if s.active > 0 || len(s.waiting) == 0 {
		return
	}
	next := s.waiting[0].at
	for _, w := range s.waiting[1:] {
		if w.at.Before(next) {
			next = w.at
		}
	}
	if next.After(s.clock.Now()) {
		s.clock.Set(next)
	}
	keep := s.waiting[:0]
	for _, w := range s.waiting {
		if w.at.After(s.clock.Now()) {
			keep = append(keep, w)
			continue
		}
		s.active++
		close(w.wake)
	}
	s.waiting = keep
}

// driveStepped processes m with r until it is done, waiting for each retry time on the stepper. first
// is closed once the first attempt returned.
func driveStepped(t *testing.T, s *stepper, r *runner.Runner, m queue.Message, first chan<- struct{}) {
	defer s.end()
	for i := 0; ; i++ {
		if i > 50 {
			t.Errorf("delivery %s not done after 50 attempts", m.Key.Short())
			if first != nil {
				close(first)
			}
			return
		}
		res, _ := r.Process(context.Background(), m)
		if i == 0 && first != nil {
			close(first)
		}
		if res.Done {
			return
		}
		s.until(res.RetryAt)
	}
}

var raceTitles = []string{"add stuff", "feat: add the thing", "fix things"} // oldest first

// raceCommit admits the three verdicts (oldest first), then has two runners publish them in
// the order given (indexes into raceTitles), each message taken by one runner or, duplicated,
// by both at once; arrivals one after another's first attempt, or all at once.
func raceCommit(t *testing.T, order []int, duplicated, together bool) {
	w := newCommitWorld(t, githubtest.New(githubtest.Token(ghToken)))
	second := w.open()
	runners := []*runner.Runner{w.titledRunner("a", nil), w.titledRunner("b", second)}
	msgs := make([]queue.Message, len(raceTitles))
	for i, title := range raceTitles {
		msgs[i] = w.pullRequest(title, epoch.Add(time.Duration(i-len(raceTitles))*time.Minute))
	}
	s := &stepper{clock: w.clock}
	var wg sync.WaitGroup
	for n, i := range order {
		copies := []*runner.Runner{runners[n%2]}
		if duplicated {
			copies = runners
		}
		var firsts []chan struct{}
		for _, r := range copies {
			first := make(chan struct{})
			firsts = append(firsts, first)
			s.begin()
			wg.Add(1)
			go func() { defer wg.Done(); driveStepped(t, s, r, msgs[i], first) }()
		}
		if !together {
			for _, f := range firsts {
				<-f
			}
		}
	}
	wg.Wait()
	newest := raceTitles[len(raceTitles)-1]
	if v := w.gh.Violations(); len(v) > 0 {
		t.Fatalf("requests outside GitHub's API description: %v", v)
	}
	created := w.gh.Created(commitRepo, headSHA)
	if got, _ := w.gh.Latest(commitRepo, headSHA, statusCtx); got.Description != "title "+newest {
		t.Fatalf("the commit shows %q, want the newest verdict's; statuses created: %+v", got.Description, created)
	}
	posted := map[string]int{}
	for _, c := range created {
		posted[c.Description]++
		if posted[c.Description] > 1 {
			t.Fatalf("verdict %q posted twice although nothing failed: %+v", c.Description, created)
		}
	}
	for i, m := range msgs {
		want := ledger.StateSuperseded
		if st := w.row(m).State; st == ledger.StateDone || (st == want && i < len(msgs)-1) {
			continue
		}
		t.Fatalf("delivery %q ended %v", raceTitles[i], w.row(m).State)
	}
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

func TestTheNewestVerdictStandsWhateverOrderTwoRunnersTakeThemIn(t *testing.T) {
	for _, order := range permutations(len(raceTitles)) {
		for _, together := range []bool{false, true} {
			for _, duplicated := range []bool{false, true} {
				t.Run(fmt.Sprintf("order%v/together=%v/duplicated=%v", order, together, duplicated), func(t *testing.T) {
					raceCommit(t, order, duplicated, together)
				})
			}
		}
	}
}
