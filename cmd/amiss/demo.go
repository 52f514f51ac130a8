package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/ledger"
)

// placeholderEnv lets a configuration load for its limits alone: ${NAME} reads the variable
// when it is set, and a placeholder otherwise.
func placeholderEnv(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return "placeholder"
}

// runDemo creates (or reopens) a file root with the configuration's limits, as amiss serve
// does, so that make demo and make run share one root, and takes one sample delivery through
// every state, printing each answer of the ledger, then the root's stats.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newCommand("demo", "[-config FILE] [-root DIR]",
		"Takes one sample delivery through every state of a file root (created when missing, with the\n"+
			"configuration's limits, as amiss serve does), printing each answer of the ledger, then its stats.\n"+
			"It needs no server and reads no secret.")
	cfgPath := fs.String("config", defaultConfig, "configuration whose limits the root records (the one amiss serve uses)")
	root := fs.String("root", defaultRoot, "ledger root folder (created when missing)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	// Only the limits are used: the demo reads no secret and needs none set.
	cfg, err := loadConfig(*cfgPath, placeholderEnv)
	if err != nil {
		return err
	}
	l, err := prepareRoot(ctx, "demo", cfg, *root, 0, true)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Fprintf(out, "ledger root %s\n", l.Dir())

	now := time.Now()
	body := fmt.Appendf(nil, `{"ref":"refs/heads/main","after":"%040x"}`, now.UnixNano())
	encoded, _ := json.Marshal(map[string]string{"provider": provider.StandardWebhooks, "repository": "acme/app",
		"sha": fmt.Sprintf("%040x", now.UnixNano()), "event": "push"})
	d := ledger.Delivery{
		Binding: ledger.Binding{Route: "demo", Scheme: webhook.SchemeStandardWebhooks,
			Identity: fmt.Sprintf("msg_demo_%d", now.UnixNano()), BodyDigest: ledger.SumBody(body)},
		Change:   encoded,
		SignedAt: now,
	}
	step := func(format string, a ...any) { fmt.Fprintf(out, "  "+format+"\n", a...) }

	a, err := l.Admit(ctx, d)
	if err != nil {
		return err
	}
	step("admit     -> %v (key %s, evaluation %s, retained until %s)", a.Outcome, a.Key, a.EvaluationID,
		a.RetainUntil.Format(time.RFC3339))
	again, err := l.Admit(ctx, d)
	if err != nil {
		return err
	}
	step("redeliver -> %v (a retry of the same webhook is answered, not admitted twice)", again.Outcome)
	c, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "demo-runner", 30*time.Second)
	if err != nil {
		return err
	}
	step("claim     -> %v (fence %d, attempt %d)", c.Outcome, c.Lease.Fence, c.Lease.Attempt)
	second, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "another-runner", 30*time.Second)
	if err != nil {
		return err
	}
	step("claim     -> %v for a second runner (retry at %s)", second.Outcome, second.RetryAt.Format(time.RFC3339))
	report := []byte(`{"state":"success","description":"demo verdict"}`)
	s, err := l.Save(ctx, *c.Lease, report)
	if err != nil {
		return err
	}
	step("save      -> staged %d bytes for publication", len(s.Report))
	step("publish   -> (the runner would post %s as a commit status here)", report)
	if err := l.Complete(ctx, s); err != nil {
		return err
	}
	step("complete  -> done")
	dup, err := l.Claim(ctx, d.Key(), d.Binding.Digest(), "late-runner", 30*time.Second)
	if err != nil {
		return err
	}
	step("claim     -> %v (evaluation %s): a late redelivery gets no new work", dup.Outcome, dup.EvaluationID)
	fmt.Fprintln(out)
	st, err := l.Stats(ctx)
	if err != nil {
		return err
	}
	printStats(out, st)
	fmt.Fprintf(out, "\nthe row, as JSON: amiss ledger inspect -root %s %s\n", *root, a.Key)
	return nil
}
