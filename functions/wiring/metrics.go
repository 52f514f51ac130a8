package wiring

import (
	"io"

	"github.com/amiss-ci/amiss/functions/metrics"
)

// Metrics returns a function's metrics: CloudWatch Embedded Metric Format lines on w in the
// namespace amiss, with the dimensions Function (the function's role: ingress, runner,
// cleanup) and, in Lambda, FunctionName (its deployed name, so that two stacks in one account
// never mix their metrics, and an alarm watches its own stack).
func Metrics(w io.Writer, function string) *metrics.EMF {
	dims := map[string]string{"Function": function}
	if name := Getenv("AWS_LAMBDA_FUNCTION_NAME"); name != "" {
		dims["FunctionName"] = name
	}
	return &metrics.EMF{Namespace: "amiss", Dimensions: dims, Out: w}
}
