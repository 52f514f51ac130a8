package runner

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/evaluate"
	"github.com/amiss-ci/amiss/ledger"
)

// Report is the frozen result a row holds: exactly what is published, and what orders it among
// the verdicts of its commit whose events carry the same time (Tie, never published).
type Report struct {
	State       string `json:"state"`
	Description string `json:"description"`
	Context     string `json:"context"`
	TargetURL   string `json:"target_url,omitempty"`
	// Files are the files the rules refused (a check run annotates them), as many as fit
	// filesBudget; FilesLeftOut counts those that did not. A report frozen without them
	// decodes with none, and one without files encodes as before.
	Files        []evaluate.File `json:"files,omitempty"`
	FilesLeftOut int             `json:"files_left_out,omitempty"`
	// Tie is what the evaluation learnt of the event's place (ledger.Tie): a report frozen
	// without it (by a runner that recorded none) is ordered by what its delivery's change
	// says, as if the provider had not been read.
	Tie ledger.Tie `json:"tie,omitzero"`
	// Read records what the evaluation read from the provider's API (never published: the
	// record of what the verdict saw, for `amiss ledger inspect`).
	Read []string `json:"read,omitempty"`
}

// filesBudget bounds a report with its files, in bytes: files are kept while the encoded report
// stays within it. It is config.MinReportBytes, the smallest report ceiling a configuration may
// set, so the files never make a verdict too large to keep (a verdict alone stays well under
// it: see MaxDescription); a ledger with a smaller ceiling still refuses one, and saveReport
// then keeps fewer.
const filesBudget = 32 << 10

// withFiles is rep with as many of files as fit filesBudget, in order, and the count left out.
func withFiles(rep Report, files []evaluate.File) Report {
	base, _ := json.Marshal(rep)
	size := len(base) + len(`,"files":[]`) + len(`,"files_left_out":`) + 10
	n := 0
	for ; n < len(files); n++ {
		b, _ := json.Marshal(files[n])
		if size+len(b)+1 > filesBudget {
			break
		}
		size += len(b) + 1
	}
	rep.Files, rep.FilesLeftOut = files[:n:n], rep.FilesLeftOut+len(files)-n
	if n == 0 {
		rep.Files = nil
	}
	return rep
}

// DefaultContext is the status context of a verdict frozen without a route (the
// configuration's default context too).
const DefaultContext = "amiss"

// MaxDescription is the longest description a saved verdict keeps, in characters (providers
// show at most 255); a longer one is cut and marked with an ellipsis.
const MaxDescription = 1024

// tooLarge is the error verdict's description when the evaluator's verdict does not fit the
// report ceiling.
const tooLarge = "amiss could not keep the evaluator's verdict: it is over the ledger's report ceiling"

// cutRunes is s cut to at most n characters, the last one an ellipsis when it was cut.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
