package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/internal/buildinfo"
	"github.com/amiss-ci/amiss/ledger"
)

// Request is one operator command, as the operator function takes it (aws lambda invoke
// --payload '{"command":"stats"}'): the read commands of amiss ledger and republish, for a
// ledger the operator's machine cannot reach (an EFS file system in the stack's private
// network).
type Request struct {
	// Command is stats, list, inspect or republish.
	Command string `json:"command"`
	// State narrows list to one state (pending, running, saved, done, abandoned, superseded).
	State string `json:"state,omitempty"`
	// Cursor continues a list where the previous answer's Next stopped; Limit is the rows
	// one answer reads (default 100, at most MaxListLimit).
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// Key is the row inspect reads or republish revives: its full key (64 hex digits).
	Key string `json:"key,omitempty"`
	// Abandoned republishes every abandoned row, those abandoned since Since when it is set
	// (an RFC 3339 time, or a duration back from now such as 24h).
	Abandoned bool   `json:"abandoned,omitempty"`
	Since     string `json:"since,omitempty"`
}

// MaxListLimit bounds the rows of one list answer, so that it stays far below Lambda's 6 MB
// response.
const MaxListLimit = 1000

// Response is the answer to a Request; Build names the build that answered.
type Response struct {
	Build string `json:"build"`
	// Stats answers stats.
	Stats *StatsView `json:"stats,omitempty"`
	// Rows and Next answer list: the rows of this page in the asked state, and the cursor of
	// the next page (empty: the last page). Damaged names the rows of the page that could not
	// be read.
	Rows    []RowLine `json:"rows,omitempty"`
	Next    string    `json:"next,omitempty"`
	Damaged []string  `json:"damaged,omitempty"`
	// Row answers inspect.
	Row *Inspected `json:"row,omitempty"`
	// Republished answers republish: what became of each row.
	Republished []Republished `json:"republished,omitempty"`
	// Note says what the answer means when its fields cannot (an empty page, when revived
	// rows are published).
	Note string `json:"note,omitempty"`
}

// StatsView is ledger.Stats for reading.
type StatsView struct {
	Rows            int64            `json:"rows"`
	ByState         map[string]int64 `json:"by_state"`
	ByLifetime      map[string]int64 `json:"by_lifetime"`
	Damaged         int64            `json:"damaged"`
	Subjects        int64            `json:"subjects"`
	CapacityUsed    int64            `json:"capacity_used"`
	RecordCap       int64            `json:"record_cap"`
	HighWater       time.Time        `json:"high_water"`
	AdmittedLastDay int64            `json:"admitted_last_day"`
	EndingNextDay   int64            `json:"ending_next_day"`
	// DaysToFull is the projection of ledger.Stats.DaysToFull, absent when the ledger does
	// not grow at this rate.
	DaysToFull *float64 `json:"days_to_full,omitempty"`
}

// RowLine is one row of a list.
type RowLine struct {
	Key       string    `json:"key"`
	State     string    `json:"state"`
	UpdatedAt time.Time `json:"updated_at"`
	Route     string    `json:"route"`
	Reason    string    `json:"reason,omitempty"`
}

// Republished is what republish did with one row.
type Republished struct {
	Key          string `json:"key"`
	EvaluationID string `json:"evaluation_id,omitempty"`
	State        string `json:"state,omitempty"`
	// Queued reports that its message was sent; Error why it was not republished, or not
	// queued.
	Queued bool   `json:"queued"`
	Error  string `json:"error,omitempty"`
}

// ErrRequest: the request cannot be carried out as written (an unknown command, a missing or
// malformed field); nothing was read or changed.
var ErrRequest = errors.New("operator: bad request")

// Handler carries out operator requests on a ledger. Only republish writes, through the
// ledger contract (Revive) and the queue; the other commands read.
type Handler struct {
	Ledger ledger.Ledger
	// Queue receives the messages of revived rows; nil: they are only revived, and the
	// cleanup's stranded sweep re-drives them.
	Queue queue.Queue
	// Now is the time "since" durations count back from (default time.Now).
	Now func() time.Time
}

// Handle carries out one request. A request that cannot be carried out is an error wrapping
// ErrRequest; one the ledger fails is the ledger's error.
func (h *Handler) Handle(ctx context.Context, req Request) (Response, error) {
	resp := Response{Build: buildinfo.Read().String()}
	var err error
	switch req.Command {
	case "stats":
		err = h.stats(ctx, &resp)
	case "list":
		err = h.list(ctx, req, &resp)
	case "inspect":
		err = h.inspect(ctx, req, &resp)
	case "republish":
		err = h.republish(ctx, req, &resp)
	case "":
		err = fmt.Errorf(`%w: no "command": one of stats, list, inspect, republish`, ErrRequest)
	default:
		err = fmt.Errorf(`%w: unknown command %q: one of stats, list, inspect, republish`, ErrRequest, req.Command)
	}
	return resp, err
}

func (h *Handler) stats(ctx context.Context, resp *Response) error {
	st, err := h.Ledger.Stats(ctx)
	if err != nil {
		return err
	}
	v := &StatsView{Rows: st.Rows, ByState: map[string]int64{}, ByLifetime: map[string]int64{}, Damaged: st.Damaged,
		Subjects: st.Subjects, CapacityUsed: st.CapacityUsed, RecordCap: st.Limits.RecordCap, HighWater: st.HighWater,
		AdmittedLastDay: st.AdmittedLastDay, EndingNextDay: st.EndingNextDay}
	for _, s := range ledger.States {
		v.ByState[s.String()] = st.ByState[s]
	}
	for _, k := range ledger.Lifetimes {
		v.ByLifetime[k.String()] = st.ByLifetime[k]
	}
	if days, ok := st.DaysToFull(); ok {
		v.DaysToFull = &days
	}
	resp.Stats = v
	return nil
}

func (h *Handler) list(ctx context.Context, req Request, resp *Response) error {
	var state ledger.State
	if req.State != "" {
		if err := state.UnmarshalText([]byte(req.State)); err != nil {
			return fmt.Errorf("%w: state %q: want pending, running, saved, done, abandoned or superseded", ErrRequest, req.State)
		}
	}
	limit := req.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > MaxListLimit:
		return fmt.Errorf("%w: limit %d: from 1 to %d", ErrRequest, limit, MaxListLimit)
	}
	page, err := h.Ledger.Rows(ctx, ledger.Cursor(req.Cursor), limit)
	if err != nil {
		return err
	}
	for _, r := range page.Rows {
		if state != 0 && r.State != state {
			continue
		}
		resp.Rows = append(resp.Rows, RowLine{Key: r.Key.String(), State: r.State.String(), UpdatedAt: r.UpdatedAt.UTC(),
			Route: r.Binding.Route, Reason: r.Reason})
	}
	for _, d := range page.Damaged {
		resp.Damaged = append(resp.Damaged, fmt.Sprintf("%s: %v", d.Name, d.Err))
	}
	resp.Next = string(page.Next)
	if len(resp.Rows) == 0 && resp.Next != "" {
		resp.Note = "no such row in this page: ask again with the cursor next"
	}
	return nil
}

func (h *Handler) inspect(ctx context.Context, req Request, resp *Response) error {
	key, err := requestKey(req)
	if err != nil {
		return err
	}
	row, err := Inspect(ctx, h.Ledger, key)
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return fmt.Errorf("no row %s: never admitted, or forgotten once its retention ended (list names the keys): %w", key, err)
	}
	if err != nil {
		return err
	}
	resp.Row = &row
	return nil
}

func (h *Handler) republish(ctx context.Context, req Request, resp *Response) error {
	report := func(key ledger.Key, row ledger.Row, err error) {
		r := Republished{Key: key.String(), EvaluationID: row.EvaluationID, Queued: err == nil && h.Queue != nil}
		if !row.Key.IsZero() {
			r.State = row.State.String()
		}
		if err != nil {
			r.Error = err.Error()
		}
		resp.Republished = append(resp.Republished, r)
	}
	switch {
	case req.Abandoned && req.Key != "":
		return fmt.Errorf(`%w: "abandoned" takes no "key": give "key" for one row, or "abandoned" (and "since") for every abandoned one`, ErrRequest)
	case req.Abandoned:
		now := time.Now
		if h.Now != nil {
			now = h.Now
		}
		since, err := ParseSince(req.Since, now())
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRequest, err)
		}
		err = RepublishAbandoned(ctx, h.Ledger, h.Queue, since, func(o Outcome) { report(o.Row.Key, o.Row, o.Err) }, func(d ledger.DamagedRow) {
			resp.Damaged = append(resp.Damaged, fmt.Sprintf("%s: %v", d.Name, d.Err))
		})
		if err != nil {
			return err
		}
	case req.Since != "":
		return fmt.Errorf(`%w: "since" goes with "abandoned"`, ErrRequest)
	default:
		key, err := requestKey(req)
		if err != nil {
			return err
		}
		row, err := Republish(ctx, h.Ledger, h.Queue, key, "")
		if err != nil && !errors.Is(err, ErrNotQueued) {
			return fmt.Errorf("republish %s: %w", key, err)
		}
		report(key, row, err)
	}
	switch {
	case len(resp.Republished) == 0:
		resp.Note = "no abandoned row to republish"
	case h.Queue != nil:
		resp.Note = "queued: the runner publishes each frozen verdict as it takes its message; a row not queued is re-driven by the cleanup once idle for its stranded threshold"
	default:
		resp.Note = "revived, not queued: the cleanup re-drives each once idle for its stranded threshold"
	}
	return nil
}

// requestKey reads the request's key.
func requestKey(req Request) (ledger.Key, error) {
	if req.Key == "" {
		return ledger.Key{}, fmt.Errorf(`%w: %s needs "key": the row's full key (64 hex digits, as logs and list print it)`, ErrRequest, req.Command)
	}
	key, err := ledger.ParseKey(req.Key)
	if err != nil {
		return ledger.Key{}, fmt.Errorf("%w: key %q: %v; give the row's full key, as logs and list print it", ErrRequest, req.Key, err)
	}
	return key, nil
}
