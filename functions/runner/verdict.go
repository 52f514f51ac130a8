package runner

import "unicode/utf8"

// Report is the frozen result a row holds: exactly what is published.
type Report struct {
	State       string `json:"state"`
	Description string `json:"description"`
	Context     string `json:"context"`
	TargetURL   string `json:"target_url,omitempty"`
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
