package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/cleanup"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/ingress"
	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/runner"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// serveOptions are amiss serve's settings.
type serveOptions struct {
	config, root, listen string
	workers              int
	lease, cleanupEvery  time.Duration
	strandedAfter        time.Duration
	grace                time.Duration
	// readTimeout bounds reading one request, body included (default 30s).
	readTimeout time.Duration
	// create makes a new root when root names none (a missing or empty folder); without it
	// such a -root is refused, since a mistyped path would otherwise start an empty ledger.
	create bool
	// ready, when set, receives the address the server listens on.
	ready chan<- string
}

// Bounds of serve's settings.
const (
	minServeLease   = time.Second
	maxServeWorkers = 256
)

func parseServe(args []string) (serveOptions, error) {
	fs := newCommand("serve", "[-config FILE] [-root DIR] [-listen ADDR] [flags]",
		"Serves webhooks at http://ADDR/hooks/ROUTE: the ingress, the runner and the cleanup in one process over a\n"+
			"file root, with an in-process queue. Every secret is read before it listens; unfinished rows are\n"+
			"queued again at start. Ctrl-C stops taking webhooks and lets work in flight finish.")
	o := serveOptions{}
	fs.StringVar(&o.config, "config", defaultConfig, "configuration file")
	fs.StringVar(&o.root, "root", defaultRoot, "ledger root folder (it must exist, unless -create)")
	fs.BoolVar(&o.create, "create", false, "make a new root when -root names none (a missing or empty folder); make run does for its own roots")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on (loopback by default)")
	fs.IntVar(&o.workers, "workers", 4, "runner workers")
	fs.DurationVar(&o.lease, "lease", 30*time.Second, "runner lease window")
	fs.DurationVar(&o.cleanupEvery, "cleanup-every", time.Minute, "cleanup interval")
	fs.DurationVar(&o.strandedAfter, "stranded-after", time.Minute,
		"idle time after which cleanup queues an unfinished row again (a revived row, a lost message)")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "time in-flight work gets to finish at shutdown")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "longest time to read one request, its body included")
	if err := fs.parse(args); err != nil {
		return o, err
	}
	if err := fs.noArgs(); err != nil {
		return o, err
	}
	if o.strandedAfter <= 0 || o.cleanupEvery <= 0 || o.lease <= 0 {
		return o, fs.usagef("-lease, -cleanup-every and -stranded-after must be positive")
	}
	if o.lease < minServeLease {
		return o, fs.usagef("-lease %s: at least %s (an evaluation, its save and its publication run under it)", o.lease, minServeLease)
	}
	if o.workers < 1 || o.workers > maxServeWorkers {
		return o, fs.usagef("-workers %d: from 1 to %d (with none, webhooks would be admitted and never evaluated)", o.workers, maxServeWorkers)
	}
	return o, nil
}

// prepareRoot prepares the file root dir with cfg's limits for the command cmd, making it when
// it is missing (a missing or empty folder) only with create; a root made with other limits is
// refused with the differing settings named and the remedy, and a folder that cannot hold a
// root with what is wrong and what to do.
func prepareRoot(ctx context.Context, cmd string, cfg *config.Config, dir string, strandedAfter time.Duration, create bool) (*localfs.Ledger, error) {
	loc, err := wiring.ParseLocation(dir, "-root", true)
	if err != nil {
		return nil, err
	}
	if loc.Bucket != "" {
		return nil, usagef(cmd, "-root %s: this command runs over a folder (an S3 ledger is served by the Lambda functions)", dir)
	}
	if !create {
		if err := refuseNewRoot(cmd, dir, loc.Dir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(loc.Dir, 0o700); err != nil {
		return nil, explainMkdir(dir, err)
	}
	if err := refuseForeignFolder(dir, loc.Dir); err != nil {
		return nil, err
	}
	l, err := wiring.OpenLedger(ctx, dir, wiring.LedgerOptions{From: "-root", Folders: true, Config: cfg, Prepare: true,
		StrandedAfter: strandedAfter})
	if err != nil {
		return nil, explainRoot(dir, true, err)
	}
	return l.(*localfs.Ledger), nil
}

// runServe runs the three handlers in one process over a file root: the embedded default.
func runServe(ctx context.Context, o serveOptions, out io.Writer) error {
	log := slog.New(slog.NewJSONHandler(out, nil))
	cfg, err := loadConfig(o.config, os.Getenv)
	if err != nil {
		return err
	}
	// Every secret is read once, now: a route that could never authenticate stops amiss here.
	secrets := wiring.Secrets(nil)
	if err := wiring.ResolveSecrets(ctx, cfg, secrets); err != nil {
		return fmt.Errorf("cannot start: %w", err)
	}
	root, err := prepareRoot(ctx, "serve", cfg, o.root, o.strandedAfter, o.create)
	if err != nil {
		return err
	}
	defer root.Close()
	q := queue.NewLocal()
	// Prompt recovery: the in-process queue died with the last process, so every unfinished
	// row is queued again now (a row still leased by the dead process comes back as Busy and
	// runs when its lease ends), instead of waiting for the stranded sweep.
	recovered, err := operator.Recover(ctx, root.Session(), q, func(d ledger.DamagedRow) {
		log.Error("damaged row skipped at recovery", "name", d.Name, "err", d.Err)
	})
	if err != nil {
		return fmt.Errorf("recovery at start: %w", err)
	}
	h := &ingress.Handler{Config: cfg, Ledger: root.Session(), Queue: q, Secrets: secrets, Log: log}

	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{route}", h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return explainListen(o.listen, err)
	}
	if o.readTimeout <= 0 {
		o.readTimeout = 30 * time.Second
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: o.readTimeout, MaxHeaderBytes: 64 << 10}
	go srv.Serve(ln)
	log.Info("amiss serving", "listen", ln.Addr().String(), "root", root.Dir(), "routes", cfg.RouteNames(), "recovered", recovered)
	if o.ready != nil {
		o.ready <- ln.Addr().String()
	}

	// Runner workers: their context outlives the signal by the grace period, so work in
	// flight finishes (or releases its lease) instead of being cut.
	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	r := &runner.Runner{Ledger: root.Session(), Routes: wiring.Routes(cfg, secrets, nil, log), Owner: fmt.Sprintf("serve-%d", os.Getpid()),
		Lease: o.lease, RetryDelay: 5 * time.Second, Log: log, PublishBudget: cfg.PublishBudget()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		(&runner.Local{Runner: r, Queue: q}).Run(workCtx, o.workers)
	}()
	// Cleanup on a timer, re-enqueueing stranded rows.
	ch := &cleanup.Handler{Ledger: root.Session(), Queue: q, Log: log, Margin: time.Second}
	// Catch-up of the routes' failed webhook deliveries on the same timer (docs/catchup.md).
	cu := &catchup.Runner{State: root.Session(), Log: log}
	ch.CatchUp = func(ctx context.Context) error {
		sources, err := catchup.Sources(ctx, cfg, secrets, nil)
		_, rerr := cu.RunAll(ctx, sources)
		return errors.Join(err, rerr)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		ch.Every(ctx, o.cleanupEvery)
	}()

	<-ctx.Done()
	log.Info("amiss shutting down: no new webhooks; in-flight work gets the grace period", "grace", o.grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	srv.Shutdown(sctx)
	q.Close() // workers drain what is ready, then stop
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	cut := false
	select {
	case <-done:
	case <-sctx.Done():
		// Cut what is still running: a cancelled evaluation releases its lease; anything else
		// keeps its lease until it ends by itself.
		cut = true
		stopWork()
		<-done
	}
	if n := q.Len(); n > 0 || cut {
		log.Info("unfinished deliveries stay in the ledger: the next amiss serve on this root queues them again at start; "+
			"a row whose work was cut runs again once its lease has ended", "queued", n, "cut", cut, "lease", o.lease)
	}
	log.Info("amiss stopped")
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
