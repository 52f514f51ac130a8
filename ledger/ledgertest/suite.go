package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// Epoch is where every case's clock starts.
var Epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// Limits are the limits the suite creates stores with: small enough to fill, with ceilings
// that make arithmetic in the cases easy to follow.
func Limits() ledger.Limits {
	return ledger.Limits{
		RecordCap:        64,
		SignedAgeCeiling: 5 * time.Minute,
		QueueCeiling:     time.Hour,
		FutureSkew:       time.Minute,
		MaxChangeBytes:   4 << 10,
		MaxReportBytes:   8 << 10,
		BodyAgeCeiling:   4 * time.Hour,
	}
}

const (
	lease         = 30 * time.Second
	strandedAfter = 10 * time.Minute
)

// RunConformanceTests runs every case of the contract against the backend newHarness makes.
func RunConformanceTests(t *testing.T, newHarness NewHarness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			defer h.Close()
			e := &env{t: t, ctx: ctx, h: h, clock: ledger.NewManualClock(Epoch), limits: Limits()}
			if c.recordCap != 0 {
				e.limits.RecordCap = c.recordCap
			}
			e.open()
			defer func() { e.l.Close() }()
			c.run(e)
		})
	}
}

type testCase struct {
	name string
	// recordCap, when not zero, is the record cap the store is created with.
	recordCap int64
	run       func(e *env)
}

// env is one case's world: a store, a handle on it and the clock both share.
type env struct {
	t      *testing.T
	ctx    context.Context
	h      Harness
	l      ledger.Ledger
	clock  *ledger.ManualClock
	limits ledger.Limits
	batch  int
	seq    int
}

func (e *env) opts() Options {
	return Options{Clock: e.clock, StrandedAfter: strandedAfter, CleanupBatch: e.batch}
}

func (e *env) open() {
	e.t.Helper()
	l, err := e.h.Open(e.ctx, e.limits, e.opts())
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	e.l = l
}

// reopen closes the handle and opens a new one, as a restarted process would.
func (e *env) reopen() {
	e.t.Helper()
	e.l.Close()
	e.open()
}

// delivery makes a new permanent delivery (signedAt zero) or a signed one.
func (e *env) delivery(signedAt time.Time) ledger.Delivery {
	e.seq++
	scheme := "github-sha256"
	if !signedAt.IsZero() {
		scheme = "standard-webhooks"
	}
	body := []byte(fmt.Sprintf(`{"n":%d}`, e.seq))
	return ledger.Delivery{
		Binding: ledger.Binding{Route: "main", Scheme: scheme, Identity: fmt.Sprintf("id-%d", e.seq),
			BodyDigest: ledger.SumBody(body)},
		Change:   []byte(fmt.Sprintf(`{"repo":"acme/app","sha":"%040d"}`, e.seq)),
		SignedAt: signedAt,
	}
}

func (e *env) admit(d ledger.Delivery, want ledger.AdmitOutcome) ledger.Admission {
	e.t.Helper()
	a, err := e.l.Admit(e.ctx, d)
	if err != nil {
		e.t.Fatalf("admit %s: %v", d.Binding.Identity, err)
	}
	if a.Outcome != want {
		e.t.Fatalf("admit %s: got %v, want %v", d.Binding.Identity, a.Outcome, want)
	}
	return a
}

func (e *env) claim(d ledger.Delivery, owner string, want ledger.ClaimOutcome) ledger.Claim {
	e.t.Helper()
	c, err := e.l.Claim(e.ctx, d.Key(), d.Binding.Digest(), owner, lease)
	if err != nil {
		e.t.Fatalf("claim %s by %s: %v", d.Binding.Identity, owner, err)
	}
	if c.Outcome != want {
		e.t.Fatalf("claim %s by %s: got %v, want %v", d.Binding.Identity, owner, c.Outcome, want)
	}
	return c
}

func (e *env) save(l ledger.Lease, report string) ledger.Staged {
	e.t.Helper()
	s, err := e.l.Save(e.ctx, l, []byte(report))
	if err != nil {
		e.t.Fatalf("save: %v", err)
	}
	return s
}

func (e *env) complete(s ledger.Staged) {
	e.t.Helper()
	if err := e.l.Complete(e.ctx, s); err != nil {
		e.t.Fatalf("complete: %v", err)
	}
}

// finish takes a fresh delivery through every state to done.
func (e *env) finish(signedAt time.Time) ledger.Delivery {
	e.t.Helper()
	d := e.delivery(signedAt)
	e.admit(d, ledger.Admitted)
	c := e.claim(d, "w", ledger.Execute)
	e.complete(e.save(*c.Lease, "verdict:success"))
	return d
}

func (e *env) row(d ledger.Delivery) ledger.Row {
	e.t.Helper()
	r, err := e.l.Inspect(e.ctx, d.Key())
	if err != nil {
		e.t.Fatalf("inspect %s: %v", d.Binding.Identity, err)
	}
	return r
}

func (e *env) gone(d ledger.Delivery) bool {
	e.t.Helper()
	_, err := e.l.Inspect(e.ctx, d.Key())
	if errors.Is(err, ledger.ErrUnknownDelivery) {
		return true
	}
	if err != nil {
		e.t.Fatalf("inspect %s: %v", d.Binding.Identity, err)
	}
	return false
}

func (e *env) stats() ledger.Stats {
	e.t.Helper()
	s, err := e.l.Stats(e.ctx)
	if err != nil {
		e.t.Fatalf("stats: %v", err)
	}
	return s
}

// cleanAll runs cleanup passes until a lap is done and merges their reports.
func (e *env) cleanAll() ledger.CleanupReport {
	e.t.Helper()
	var all ledger.CleanupReport
	cur := ledger.Cursor("")
	for i := 0; ; i++ {
		if i > 10_000 {
			e.t.Fatalf("cleanup never finished a lap")
		}
		r, err := e.l.Cleanup(e.ctx, cur)
		if err != nil {
			e.t.Fatalf("cleanup: %v", err)
		}
		all.Removed = append(all.Removed, r.Removed...)
		all.Retained += r.Retained
		all.Damaged = append(all.Damaged, r.Damaged...)
		all.Stranded = append(all.Stranded, r.Stranded...)
		all.OldestUnfinished = ledger.Earliest(all.OldestUnfinished, r.OldestUnfinished)
		all.HighWater = r.HighWater
		all.RemovedSubjects += r.RemovedSubjects
		if r.Done {
			return all
		}
		cur = r.Next
	}
}

func removedKeys(r ledger.CleanupReport) map[ledger.Key]bool {
	m := map[ledger.Key]bool{}
	for _, x := range r.Removed {
		m[x.Key] = true
	}
	return m
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// capacityHolds checks the capacity record never understates the rows stored.
func (e *env) capacityHolds(exact bool) {
	e.t.Helper()
	s := e.stats()
	if s.CapacityUsed < s.Rows {
		e.t.Fatalf("capacity understates use: %d slots for %d rows", s.CapacityUsed, s.Rows)
	}
	if exact && s.CapacityUsed != s.Rows {
		e.t.Fatalf("capacity %d, rows %d: want equal", s.CapacityUsed, s.Rows)
	}
}

// cases lists every conformance case, by topic: the subtest's name, the record cap its store is
// created with (0: the suite's), and the case.
var cases = []testCase{
	// cases_state.go
	{"StateIsWrittenOnlyOnTheVersionRead", 0, caseStateIsWrittenOnlyOnTheVersionRead},
	{"StateOverItsCeilingOrBadlyNamedIsRefusedWhole", 0, caseStateOverItsCeilingOrBadlyNamedIsRefusedWhole},
	{"ConcurrentStateWritersLoseNoStep", 0, caseConcurrentStateWritersLoseNoStep},
	// cases_lease.go
	{"Lifecycle", 0, caseLifecycle},
	{"UnknownKeyIsAnError", 0, caseUnknownKeyIsAnError},
	{"Invariant1_ConcurrentClaimsGrantOneOwner", 0, caseInvariant1ConcurrentClaimsGrantOneOwner},
	{"Invariant2_FencesGrowAcrossReopen", 0, caseInvariant2FencesGrowAcrossReopen},
	{"Invariant3_ForgedExpiryIsRefused", 0, caseInvariant3ForgedExpiryIsRefused},
	{"Invariant4_ExpiredOwnerCannotSave", 0, caseInvariant4ExpiredOwnerCannotSave},
	{"Invariant5_SavedResultIsPublishedWithIdenticalBytes", 0, caseInvariant5SavedResultIsPublishedWithIdenticalBytes},
	{"Invariant6_CompletionIsRepeatableAndGrantsNothing", 0, caseInvariant6CompletionIsRepeatableAndGrantsNothing},
	{"Invariant8_FreshEvaluationIDPerRow", 0, caseInvariant8FreshEvaluationIDPerRow},
	{"ExpiredOwnerCannotRenewButLivePublishLeaseCan", 0, caseExpiredOwnerCannotRenewButLivePublishLeaseCan},
	{"ReleaseHandsBackEarlyAndHoldsOffUntilNotBefore", 0, caseReleaseHandsBackEarlyAndHoldsOffUntilNotBefore},
	{"UnclaimHandsBackTheAttempt", 0, caseUnclaimHandsBackTheAttempt},
	{"RepeatedSaveAnswersTheSameStagedResult", 0, caseRepeatedSaveAnswersTheSameStagedResult},
	{"AbandonedRowAnswersDuplicate", 0, caseAbandonedRowAnswersDuplicate},
	// cases_admission.go
	{"Invariant7_BindingConflictOnAdmitAndClaim", 0, caseInvariant7BindingConflictOnAdmitAndClaim},
	{"Invariant10_AdmissionIssuesNoListingAndBoundedOperations", 1000, caseInvariant10AdmissionIssuesNoListingAndBoundedOperations},
	{"Invariant11_FullRefusesNewKeysWhileWorkCompletes", 6, caseInvariant11FullRefusesNewKeysWhileWorkCompletes},
	{"Invariant11_FullOnlyWhenTheWholeCapIsUsed", 40, caseInvariant11FullOnlyWhenTheWholeCapIsUsed},
	{"Invariant13_OversizedStateOrReportIsRefusedWhole", 0, caseInvariant13OversizedStateOrReportIsRefusedWhole},
	// cases_time.go
	{"Invariant9_RouteCannotWidenAcceptance", 0, caseInvariant9RouteCannotWidenAcceptance},
	{"Invariant9_LaterSignedTimeLengthensRetention", 0, caseInvariant9LaterSignedTimeLengthensRetention},
	{"EndInstantOfReplayLifetimeIsInsideTheWindow", 0, caseEndInstantOfReplayLifetimeIsInsideTheWindow},
	{"Invariant12_ClockMovedBackwardsReopensNothing", 0, caseInvariant12ClockMovedBackwardsReopensNothing},
	{"StaleStaysRefusedAfterCleanupAndClockStepBack", 0, caseStaleStaysRefusedAfterCleanupAndClockStepBack},
	// cases_bodytime.go
	{"BodyTimeBoundsReplayMemory", 0, caseBodyTimeBoundsReplayMemory},
	{"Invariant9_BodyAgeRouteCannotWiden", 0, caseInvariant9BodyAgeRouteCannotWiden},
	{"RowsOfEveryLifetimeSideBySide", 0, caseRowsOfEveryLifetimeSideBySide},
	// cases_cleanup.go
	{"PermanentRowsAreNeverCleaned", 0, casePermanentRowsAreNeverCleaned},
	{"UnfinishedRowsSurviveCleanupWhateverTheirAge", 0, caseUnfinishedRowsSurviveCleanupWhateverTheirAge},
	{"StrandedRowsOfEveryKindAreReported", 0, caseStrandedRowsOfEveryKindAreReported},
	{"CleanupReportsTheOldestUnfinishedRow", 0, caseCleanupReportsTheOldestUnfinishedRow},
	{"OnlyOneCleanupRunsAtATime", 0, caseOnlyOneCleanupRunsAtATime},
	{"FailedListingRemovesNothing", 0, caseFailedListingRemovesNothing},
	{"RepeatedCleanupReleasesCapacityOnce", 0, caseRepeatedCleanupReleasesCapacityOnce},
	{"RowIndexedTwiceReleasesItsSlotOnce", 0, caseRowIndexedTwiceReleasesItsSlotOnce},
	// cases_durability.go
	{"DamagedRowIsSkippedAndReported", 0, caseDamagedRowIsSkippedAndReported},
	{"Invariant14_UnreadableRowFailsClosed", 0, caseInvariant14UnreadableRowFailsClosed},
	{"InterruptedAdmissionIsRecounted", 0, caseInterruptedAdmissionIsRecounted},
	{"CrashAtEveryStepLeavesEveryOperationLegible", 10000, caseCrashAtEveryStepLeavesEveryOperationLegible},
	// cases_operator.go
	{"RevivedVerdictIsPublishedWithTheSameBytes", 0, caseRevivedVerdictIsPublishedWithTheSameBytes},
	{"OnlyAnAbandonedRowCanBeRevived", 0, caseOnlyAnAbandonedRowCanBeRevived},
	{"AnEmptyReportIsKeptLikeAnyOther", 0, caseAnEmptyReportIsKeptLikeAnyOther},
	{"RowsListsEveryRowOnceAndNamesTheDamaged", 0, caseRowsListsEveryRowOnceAndNamesTheDamaged},
	// cases_subject.go
	{"Subject_OlderVerdictIsSupersededByANewerOne", 0, caseSubjectOlderVerdictIsSupersededByANewerOne},
	{"Subject_GrantsOnePosterAtATime", 0, caseSubjectGrantsOnePosterAtATime},
	{"Subject_ReportUnderATakenOverGrantIsLost", 0, caseSubjectReportUnderATakenOverGrantIsLost},
	{"Subject_RecordSurvivesReopen", 0, caseSubjectRecordSurvivesReopen},
	{"Subject_RecordIsForgottenOnlyWhenNothingCanStillLand", 0, caseSubjectRecordIsForgottenOnlyWhenNothingCanStillLand},
	{"Subject_RequestIsChecked", 0, caseSubjectRequestIsChecked},
	{"Subject_SupersededRowIsCleanedLikeADoneOne", 0, caseSupersededRowIsCleanedLikeADoneOne},
	{"Subject_DamagedRecordFailsClosed", 0, caseDamagedSubjectRecordFailsClosed},
	{"Subject_ReportHandsTheParkedVerdictsWakeBack", 0, caseSubjectReportHandsTheParkedVerdictsWakeBack},
	// cases_subject_forget.go
	{"Subject_OlderVerdictAfterItsRecordIsForgottenReadsBackFirst", 0, caseSubjectOlderVerdictAfterItsRecordIsForgottenReadsBackFirst},
	{"Subject_StandingVerdictPublishedAgainAfterItsRecordIsForgottenReadsBack", 0, caseSubjectStandingVerdictPublishedAgainAfterItsRecordIsForgottenReadsBack},
	{"Subject_ReportAfterItsRecordIsForgottenIsLost", 0, caseSubjectReportAfterItsRecordIsForgottenIsLost},
	// cases_subject_limits.go
	{"Subject_RecordOfTheLargestSubjectIsLegible", 0, caseSubjectRecordOfTheLargestSubjectIsLegible},
	{"Subject_OfNamesNotUTF8IsRefused", 0, caseSubjectOfNamesNotUTF8IsRefused},
}

// tick is the smallest step of the clock that the backend tells apart.
func (e *env) tick() time.Duration {
	if r := e.h.Resolution(); r > 0 {
		return r
	}
	return time.Nanosecond
}

// bytesEqual is a helper for report comparisons with a readable failure.
func (e *env) sameBytes(what string, got, want []byte) {
	e.t.Helper()
	if !bytes.Equal(got, want) {
		e.t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// parallel runs f n times concurrently and waits.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}
