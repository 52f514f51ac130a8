package wiring

import (
	"io"

	"github.com/amiss-ci/amiss/functions/metrics"
)

// AlarmCounters are, per function, the counters the deployment's alarms read against one
// another or want to see fall back to zero: each is on every metrics line the function
// writes, as 0 when nothing was counted (metrics.EMF.Zero). The ingress's two make the alarm
// on webhooks refused while none is admitted; the runner's let the alarms on refused
// publications and abandoned rows see a period with publications and none refused.
var AlarmCounters = map[string][]string{
	"ingress": {"admitted", "unauthenticated"},
	"runner":  {"publish_refused", "abandoned"},
}

// Metrics returns a function's metrics: CloudWatch Embedded Metric Format lines on w in the
// namespace amiss, with the dimensions Function (the function's role: ingress, runner,
// cleanup) and, in Lambda, FunctionName (its deployed name, so that two stacks in one account
// never mix their metrics, and an alarm watches its own stack). The function's AlarmCounters
// are on every line.
func Metrics(w io.Writer, function string) *metrics.EMF {
	dims := map[string]string{"Function": function}
	if name := Getenv("AWS_LAMBDA_FUNCTION_NAME"); name != "" {
		dims["FunctionName"] = name
	}
	return &metrics.EMF{Namespace: "amiss", Dimensions: dims, Out: w, Zero: AlarmCounters[function]}
}
