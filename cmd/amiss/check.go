package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/catchup"
	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/provider"
	"github.com/amiss-ci/amiss/functions/secrets"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/internal/samtemplate"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
)

// errCheck: amiss check found problems (each already printed).
var errCheck = errors.New("check failed")

// runCheck checks a configuration without sending anything to a provider.
//
// Without -template, as amiss would run it here: the file loads, every secret it names can
// be read, the ledger root (when it exists) records the configuration's limits, and each
// publisher's base URL answers HTTP; a route publishing as a GitHub App has its key, its JWT,
// its installations and their tokens checked (checkApp); a route whose rules read what its
// webhooks lack has a credential that reads each repository it names (checkReads). No status
// or check run is posted and no webhook is sent.
//
// With -template, as a SAM build packages it: every environment variable the file reads
// (${NAME}, env:NAME) is one the template declares for the functions, since Lambda sets no
// other. The Makefile's build targets run this, so sam build refuses such a file.
func runCheck(ctx context.Context, args []string, out io.Writer) error {
	fs := newCommand("check", "[-config FILE] [-root DIR|s3://bucket/prefix/] | -template template.yaml [-function NAME] [-config FILE]",
		"Checks a configuration without sending anything to a provider: it loads, every secret it names can be\n"+
			"read, the ledger root records its limits, each publisher's base URL answers; a GitHub App's key and\n"+
			"JWT are accepted, and it is installed, with a token to be had, on each repository the route names; a\n"+
			"route whose rules read what webhooks lack reads each repository it names (posting nothing).\n"+
			"Each check prints ok or FAIL with the remedy; any FAIL exits 1. With -template: every variable the\n"+
			"file reads is one the SAM template declares for the functions.")
	cfgPath := fs.String("config", defaultConfig, "configuration file")
	root := fs.String("root", "", "ledger root to probe: a folder or s3://bucket/prefix/ (default: AMISS_LEDGER's, else "+defaultRoot+")")
	template := fs.String("template", "", "check the file against this SAM template's declared environment instead")
	function := fs.String("function", "", "with -template: only this function (default: every function)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long each probe may take")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	if *template != "" {
		return checkPackaged(*cfgPath, *template, *function, out)
	}
	c := &checker{out: out}
	cfg, err := loadConfig(*cfgPath, os.Getenv)
	if err != nil {
		c.fail("configuration %s: %v", *cfgPath, err)
		return c.done()
	}
	c.ok("configuration %s: routes %s", *cfgPath, strings.Join(cfg.RouteNames(), ", "))

	var res secrets.Source = wiring.Secrets(nil)
	if usesSecretsManager(cfg) {
		awsCfg, err := wiring.AWS(ctx)
		if err != nil {
			c.fail("AWS configuration for Secrets Manager: %v", err)
		} else {
			res = wiring.Secrets(&awsCfg)
		}
	}
	for _, u := range cfg.SecretUses() {
		pctx, cancel := context.WithTimeout(ctx, *timeout)
		err := wiring.ResolveSecret(pctx, res, u)
		cancel()
		if err != nil {
			c.fail("%v", err)
			continue
		}
		c.ok("%s: route %s: %s from %s can be read", u.Path, u.Route, u.What, u.From)
	}

	spec := *root
	if spec == "" {
		spec = os.Getenv(wiring.EnvLedger)
	}
	if spec == "" {
		spec = defaultRoot
	}
	pctx, cancel := context.WithTimeout(ctx, *timeout)
	c.probeLedger(pctx, cfg, spec)
	cancel()

	hc := &http.Client{Timeout: *timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, name := range cfg.RouteNames() {
		c.checkPublisher(ctx, res, cfg.Route(name), hc, *timeout)
		c.checkReads(ctx, res, cfg.Route(name), hc, *timeout)
	}
	c.checkCatchUp(ctx, cfg, res, hc, *timeout)
	return c.done()
}

// checkPublisher checks where r's verdicts go: the publisher's base URL answers HTTP (a GET),
// and a GitHub App's key, installations and tokens (checkApp).
func (c *checker) checkPublisher(ctx context.Context, res secrets.Source, r *config.Route, hc *http.Client, timeout time.Duration) {
	name, p := r.Name, r.Publish
	if p.Provider == provider.Log {
		c.ok("routes.%s.publish: verdicts go to the log", name)
		return
	}
	resp, err := hc.Get(p.BaseURL)
	if err != nil {
		c.fail("routes.%s.publish.base_url: %s does not answer: %v", name, p.BaseURL, err)
		return
	}
	resp.Body.Close()
	c.ok("routes.%s.publish.base_url: %s answers (HTTP %d; no status was posted)", name, p.BaseURL, resp.StatusCode)
	if p.App != nil {
		c.checkApp(ctx, res, r, hc, timeout)
	}
}

// checkCatchUp lists one page of each catch-up hook's deliveries: the credential reads them.
// Nothing is redelivered.
func (c *checker) checkCatchUp(ctx context.Context, cfg *config.Config, res catchup.Secrets, hc *http.Client, timeout time.Duration) {
	sources, err := catchup.Sources(ctx, cfg, res, hc)
	if err != nil {
		c.fail("%v", err)
	}
	for _, s := range sources {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := s.Attempts(pctx, 1, func([]catchup.Attempt) (bool, error) { return false, nil })
		cancel()
		if err != nil && !errors.Is(err, catchup.ErrListingCut) {
			c.fail("%s: its deliveries cannot be listed (docs/catchup.md, credentials): %v", s.Describe(), err)
			continue
		}
		c.ok("%s: its deliveries can be listed (nothing was redelivered)", s.Describe())
	}
}

func usesSecretsManager(cfg *config.Config) bool {
	for _, u := range cfg.SecretUses() {
		if strings.HasPrefix(u.From, "aws-secretsmanager:") {
			return true
		}
	}
	return false
}

// probeLedger reads the root's recorded limits (a file root or an S3 prefix) and compares
// them with the configuration's. A root that does not exist yet is fine: it is created at
// the first start, unless the folder holds other files (serve would refuse it).
func (c *checker) probeLedger(ctx context.Context, cfg *config.Config, spec string) {
	loc, err := wiring.ParseLocation(spec, "-root", true)
	if err != nil {
		c.fail("ledger %s: %v", spec, err)
		return
	}
	name := loc.Spec
	if loc.Bucket == "" {
		name = loc.Dir
		if _, err := os.Stat(filepath.Join(loc.Dir, localfs.RootFile)); errors.Is(err, fs.ErrNotExist) {
			if err := refuseForeignFolder(spec, loc.Dir); err != nil {
				c.fail("ledger %s: %v", name, err)
				return
			}
			c.ok("ledger %s: no root yet; amiss serve -create (make run) makes it with the configuration's limits", name)
			return
		}
	}
	stored, err := wiring.StoredLimits(ctx, loc)
	if err != nil {
		c.fail("ledger %s: %v", name, explainRoot(spec, false, err))
		return
	}
	c.compareLimits(cfg, name, stored)
}

func (c *checker) compareLimits(cfg *config.Config, spec string, stored ledger.Limits) {
	if err := wiring.LimitsError(cfg, spec, stored); err != nil {
		c.fail("%v", err)
		return
	}
	if cfg.AdoptsBodyTimes(stored) {
		c.ok("ledger %s: its root records the configuration's limits but no body-age ceiling: it adopts body_age_ceiling %s "+
			"when first opened (rows written so far stay permanent)", spec, cfg.Controller.BodyAgeCeiling)
		return
	}
	c.ok("ledger %s: its root records the configuration's limits", spec)
}

// checkPackaged checks that every variable the configuration reads is declared for the
// template's functions.
func checkPackaged(cfgPath, templatePath, function string, out io.Writer) error {
	c := &checker{out: out}
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	uses, err := config.EnvUses(data)
	if err != nil {
		return fmt.Errorf("configuration %s: %w", cfgPath, err)
	}
	tpl, err := samtemplate.Read(templatePath)
	if err != nil {
		return err
	}
	names := tpl.FunctionNames()
	if function != "" {
		if _, ok := tpl.Functions[function]; !ok {
			return fmt.Errorf("%s has no function %s (functions: %s)", templatePath, function, strings.Join(names, ", "))
		}
		names = []string{function}
	}
	for _, u := range uses {
		var missing []string
		for _, fn := range names {
			if _, ok := tpl.Functions[fn].Env[u.Name]; !ok {
				missing = append(missing, fn)
			}
		}
		sort.Strings(missing)
		switch {
		case len(missing) == 0:
			c.ok("%s: %s reads %s, which %s declares", cfgPath, u.Path, u.Name, templatePath)
		case u.Secret:
			c.fail("%s: %s reads the secret env:%s, which %s does not declare for %s: in Lambda it would be unset and every webhook refused. Keep secrets in AWS Secrets Manager (aws-secretsmanager:ARN, the ARN in the SecretArns parameter); see docs/deployment.md",
				cfgPath, u.Path, u.Name, templatePath, strings.Join(missing, ", "))
		default:
			c.fail("%s: %s reads ${%s}, which %s does not declare for %s: declare it in the template's Environment (Globals), or write the value in the file",
				cfgPath, u.Path, u.Name, templatePath, strings.Join(missing, ", "))
		}
	}
	if len(uses) == 0 {
		c.ok("%s reads no environment variable", cfgPath)
	}
	return c.done()
}

// checker prints one line per check and counts failures.
type checker struct {
	out          io.Writer
	okN, failedN int
}

func (c *checker) ok(format string, a ...any) {
	c.okN++
	fmt.Fprintf(c.out, "ok    "+format+"\n", a...)
}

func (c *checker) fail(format string, a ...any) {
	c.failedN++
	fmt.Fprintf(c.out, "FAIL  "+format+"\n", a...)
}

func (c *checker) done() error {
	fmt.Fprintf(c.out, "amiss check: %d passed, %d failed\n", c.okN, c.failedN)
	if c.failedN > 0 {
		return fmt.Errorf("%w: %d of %d checks", errCheck, c.failedN, c.okN+c.failedN)
	}
	return nil
}
