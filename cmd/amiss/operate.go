package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/wiring"
	"github.com/amiss-ci/amiss/ledger"
)

// runList prints one line per row, tab-separated: the full key (the one logs print, inspect
// and republish take), the state, the last transition, the route, and for an abandoned row
// its reason. Damaged rows are named on errOut, and so is an empty answer (stdout stays one row
// a line, for scripts).
func runList(ctx context.Context, c *command, root *string, args []string, out, errOut io.Writer) error {
	stateName := c.String("state", "", "only rows in this state: pending, running, saved, done, abandoned or superseded")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	var state ledger.State
	if *stateName != "" {
		if err := state.UnmarshalText([]byte(*stateName)); err != nil {
			return c.usagef("-state %q: want pending, running, saved, done, abandoned or superseded", *stateName)
		}
	}
	l, err := openRoot(ctx, *root, false)
	if err != nil {
		return err
	}
	defer l.Close()
	damaged, rows := 0, 0
	err = operator.List(ctx, l, state, func(r ledger.Row) error {
		rows++
		line := fmt.Sprintf("%s\t%s\t%s\t%s", r.Key, r.State, r.UpdatedAt.UTC().Format(time.RFC3339), r.Binding.Route)
		if r.Reason != "" {
			line += "\t" + strings.ReplaceAll(r.Reason, "\n", " ")
		}
		_, err := fmt.Fprintln(out, line)
		return err
	}, func(d ledger.DamagedRow) {
		damaged++
		fmt.Fprintf(errOut, "damaged: %s: %v\n", d.Name, d.Err)
	})
	if err != nil {
		return err
	}
	if damaged > 0 {
		return fmt.Errorf("%d rows could not be read (amiss ledger verify says more)", damaged)
	}
	if rows == 0 {
		if *stateName != "" {
			fmt.Fprintf(errOut, "no %s row in %s\n", *stateName, *root)
		} else {
			fmt.Fprintf(errOut, "no row in %s\n", *root)
		}
	}
	return nil
}

// queueFor returns the queue revived rows are sent to: the SQS queue url names (AWS
// credentials and region from the environment), or nil when url is empty.
func queueFor(ctx context.Context, url string) (queue.Queue, error) {
	if url == "" {
		return nil, nil
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	if err := wiring.RequireCredentials(ctx, cfg.Credentials, "-queue "+url); err != nil {
		return nil, err
	}
	return &queue.SQS{Client: sqs.NewFromConfig(cfg), QueueURL: url}, nil
}

// parseSince reads -since: an RFC 3339 time, or a duration back from now (24h).
func parseSince(s string, now time.Time) (time.Time, error) {
	t, err := operator.ParseSince(s, now)
	if err != nil {
		return time.Time{}, usagef("ledger republish", "-%v", err)
	}
	return t, nil
}

// runRepublish revives abandoned rows (the frozen verdict, never evaluated again) and queues
// them: `republish KEY` for one, `republish -abandoned [-since T]` for every one abandoned
// since T.
func runRepublish(ctx context.Context, c *command, root *string, args []string, out io.Writer) error {
	all := c.Bool("abandoned", false, "republish every abandoned row (with -since, those abandoned since then)")
	sinceFlag := c.String("since", "", "with -abandoned: only rows abandoned at or after this time (RFC 3339, or a duration back from now)")
	queueURL := c.String("queue", os.Getenv("AMISS_QUEUE_URL"), "SQS queue URL to queue revived rows on (default $AMISS_QUEUE_URL)")
	if err := c.parse(args); err != nil {
		return err
	}
	since, err := parseSince(*sinceFlag, time.Now())
	if err != nil {
		return err
	}
	var key ledger.Key
	switch {
	case *all && c.NArg() == 0:
	case *all:
		return c.usagef("-abandoned takes no KEY (got %q): republish KEY for one row, or -abandoned [-since T] for every abandoned one", c.Arg(0))
	case *sinceFlag != "":
		return c.usagef("-since goes with -abandoned: republish KEY for one row, or -abandoned [-since T] for every abandoned one")
	default:
		if key, err = keyArg(c); err != nil {
			return err
		}
	}
	q, err := queueFor(ctx, *queueURL)
	if err != nil {
		return err
	}
	l, err := openRoot(ctx, *root, false)
	if err != nil {
		return err
	}
	defer l.Close()
	n, notQueued, failed := 0, 0, 0
	report := func(row ledger.Row, err error) {
		switch {
		case err == nil:
			n++
			fmt.Fprintf(out, "republished %s (evaluation %s): %v\n", row.Key, row.EvaluationID, row.State)
		case errors.Is(err, operator.ErrNotQueued):
			notQueued++
			failed++
			fmt.Fprintf(out, "revived %s but not queued: %v\n", row.Key, err)
		default:
			failed++
			fmt.Fprintf(out, "not republished %s: %v\n", row.Key, err)
		}
	}
	if *all {
		err = operator.RepublishAbandoned(ctx, l, q, since, func(o operator.Outcome) { report(o.Row, o.Err) },
			func(d ledger.DamagedRow) { fmt.Fprintf(out, "damaged: %s: %v\n", d.Name, d.Err) })
		if err != nil {
			return err
		}
	} else {
		row, err := operator.Republish(ctx, l, q, key, "")
		if err != nil && !errors.Is(err, operator.ErrNotQueued) {
			return fmt.Errorf("republish %s: %w", key, err)
		}
		row.Key = key
		report(row, err)
	}
	if n > 0 {
		fmt.Fprintln(out, whenPublished(*root, q != nil))
	}
	if notQueued > 0 {
		fmt.Fprintln(out, whenPublished(*root, false))
	}
	if n == 0 && failed == 0 {
		fmt.Fprintln(out, "no abandoned row to republish")
	}
	if failed > 0 {
		return fmt.Errorf("%d rows not republished", failed)
	}
	return nil
}

// whenPublished says truthfully when revived rows are published.
func whenPublished(root string, queued bool) string {
	switch {
	case queued:
		return "queued: the runner publishes them as it takes the messages"
	case strings.HasPrefix(root, "s3://"):
		return "not queued (no -queue or AMISS_QUEUE_URL): the cleanup function re-drives them once idle for its stranded " +
			"threshold (15 minutes) at its next run (every 5 minutes)"
	}
	return "not queued: an amiss serve running on this root publishes them once idle for its -stranded-after (1 minute by " +
		"default) at its next cleanup (-cleanup-every, 1 minute); otherwise the next amiss serve on this root queues them at start"
}
