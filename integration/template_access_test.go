package integration_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The template's throttles, logs, roles, dashboard and builds as an operator meets them: the
// stage admits no more at once than the ingress can take, the access log tells a 401 from a
// 413 from a 429, an operator reaches either ledger, no role writes another's log group, the
// dashboard shows the deployment, the log groups outlive the stack when asked, and every
// bootstrap says which build it is.

// The stage's burst is the ingress's reservation, so a burst it admits never finds the ingress
// throttled (a 5xx); its steady rate times the ingress's duration the defaults allow (half a
// second) fits the reservation; docs/deployment.md states the rule.
func TestTheThrottlesAddUp(t *testing.T) {
	raw := rawTemplate(t)
	routes := child(child(child(child(raw, "Resources"), "HttpApi"), "Properties"), "DefaultRouteSettings")
	if v := child(routes, "ThrottlingBurstLimit"); v == nil || v.Tag != "!Ref" || v.Value != "IngressReservedConcurrency" {
		t.Fatal("the stage's burst is not IngressReservedConcurrency")
	}
	var rate, reserved int
	fmt.Sscan(child(child(child(raw, "Parameters"), "ApiThrottlingRateLimit"), "Default").Value, &rate)
	fmt.Sscan(child(child(child(raw, "Parameters"), "IngressReservedConcurrency"), "Default").Value, &reserved)
	const ingressSeconds = 0.5 // the ingress's duration the defaults allow
	if float64(rate)*ingressSeconds > float64(reserved) {
		t.Errorf("%d requests a second for %v s each need %v ingress invocations at once; %d are reserved", rate, ingressSeconds, float64(rate)*ingressSeconds, reserved)
	}
	doc := readFile(t, "docs/deployment.md")
	for _, rule := range []string{"`IngressReservedConcurrency` ≥ `ApiThrottlingRateLimit` × the ingress's duration", "half a second"} {
		if !strings.Contains(doc, rule) {
			t.Errorf("docs/deployment.md does not state the sizing rule (%q)", rule)
		}
	}
}

// The HTTP API writes an access log: one JSON line per request with the answer, what Lambda
// answered, what the ingress answered, API Gateway's own error and the ingress's request id;
// 429s (the stage's throttle) are counted from it for an alarm and the dashboard.
func TestTheAccessLogTellsTheRefusalsApart(t *testing.T) {
	raw := rawTemplate(t)
	res := child(raw, "Resources")
	als := child(child(child(res, "HttpApi"), "Properties"), "AccessLogSettings")
	if v := child(als, "DestinationArn"); v == nil || v.Tag != "!GetAtt" || v.Value != "ApiAccessLogGroup.Arn" {
		t.Fatal("the HTTP API's access log is not ApiAccessLogGroup")
	}
	var line map[string]string
	if err := json.Unmarshal([]byte(child(als, "Format").Value), &line); err != nil {
		t.Fatalf("the access log format is not a JSON object: %v", err)
	}
	for field, variable := range map[string]string{"status": "$context.status", "integrationStatus": "$context.integrationStatus",
		"functionStatus": "$context.integration.status", "error": "$context.error.message",
		"lambdaRequestId": "$context.integration.requestId", "apiId": "$context.apiId", "sourceIp": "$context.identity.sourceIp"} {
		if line[field] != variable {
			t.Errorf("access log field %s is %q, want %s", field, line[field], variable)
		}
	}
	filter := child(child(res, "ApiThrottledFilter"), "Properties")
	mt := child(filter, "MetricTransformations").Content[0]
	if child(filter, "LogGroupName").Value != "ApiAccessLogGroup" || child(filter, "FilterPattern").Value != `{ $.status = "429" }` ||
		child(mt, "MetricName").Value != "webhooks_throttled" || child(mt, "MetricNamespace").Value != "amiss" ||
		values(child(mt, "Dimensions")) != "Key ApiId Value $.apiId" {
		t.Errorf("the 429s are not counted from the access log as amiss webhooks_throttled by ApiId:\n%s", yamlString(t, filter))
	}
}

// roleOf is the logical id of a function's role.
func roleOf(t *testing.T, raw *yaml.Node, fn string) string {
	t.Helper()
	name, _ := strings.CutSuffix(child(child(child(child(raw, "Resources"), fn), "Properties"), "Role").Value, ".Arn")
	return name
}

// No role writes to a log group but its function's own, and none takes AWS's VPC execution
// policy (whose logs statement covers every group): the EFS variant's roles have the EC2 calls
// for the functions' network interfaces written out, under UseEFS only.
func TestEachRoleWritesOnlyItsOwnLogGroup(t *testing.T) {
	raw := rawTemplate(t)
	fns := []string{"IngressFunction", "RunnerFunction", "CleanupFunction", "OperatorFunction"}
	for _, fn := range fns {
		group := child(child(child(child(child(raw, "Resources"), fn), "Properties"), "LoggingConfig"), "LogGroup").Value
		role := child(child(child(raw, "Resources"), roleOf(t, raw, fn)), "Properties")
		if strings.Contains(yamlString(t, child(role, "ManagedPolicyArns")), "VPCAccess") {
			t.Errorf("%s's role takes AWS's VPC execution policy", fn)
		}
		var vpc bool
		for _, p := range child(role, "Policies").Content {
			for _, st := range child(child(p, "PolicyDocument"), "Statement").Content {
				st = deref(st)
				cond := ""
				if st.Tag == "!If" {
					cond, st = st.Content[0].Value, deref(st.Content[1])
				}
				acts := statementActions(st)
				for _, a := range acts {
					if strings.HasPrefix(a, "logs:") {
						if r := child(st, "Resource"); r == nil || r.Tag != "!GetAtt" || r.Value != group+".Arn" {
							t.Errorf("%s may call %s on %s, not only its log group %s", fn, a, yamlString(t, child(st, "Resource")), group)
						}
					}
				}
				if slices.Contains(acts, "ec2:CreateNetworkInterface") {
					vpc = true
					if cond != "UseEFS" {
						t.Errorf("%s may make network interfaces outside the EFS variant (condition %q)", fn, cond)
					}
				}
			}
		}
		if !vpc {
			t.Errorf("%s's role cannot make the network interfaces the EFS variant needs", fn)
		}
	}
}

// The operator function reaches the ledger where an operator's machine cannot: it mounts the
// EFS access point as the other functions do (or reads the S3 prefix), takes no event, reads
// no configuration and no secret, never deletes, and opens the ledger without migrating it;
// docs/deployment.md shows how to invoke it, and the IAM an operator needs for it and for the
// S3 ledger from a machine of one's own.
func TestAnOperatorReachesEitherLedger(t *testing.T) {
	raw := rawTemplate(t)
	fn := child(child(raw, "Resources"), "OperatorFunction")
	if child(fn, "Condition") != nil || child(child(fn, "Properties"), "Events") != nil {
		t.Error("the operator function is conditional or has an event")
	}
	if main := readFile(t, "functions/cmd/operator/main.go"); !strings.Contains(main, "wiring.Function{Name: \"operator\", Operator: true}") {
		t.Error("the operator function does not start as wiring.Function{Operator: true} (no configuration, the ledger read-only)")
	}
	if boot := readFile(t, "functions/wiring/boot.go"); !strings.Contains(boot, "LedgerOptions{ReadOnly: true}") {
		t.Error("the operator function's ledger is not opened ReadOnly")
	}
	var grants []string
	for _, st := range statements(t, raw, "OperatorFunction") {
		grants = append(grants, statementActions(st)...)
	}
	for _, g := range grants {
		if strings.HasPrefix(g, "secretsmanager:") || strings.HasPrefix(g, "kms:") || strings.Contains(g, "Delete") && g != "ec2:DeleteNetworkInterface" ||
			g == "s3:ListBucketVersions" {
			t.Errorf("the operator function's role has %s", g)
		}
	}
	doc := readFile(t, "docs/deployment.md")
	for _, want := range []string{"aws lambda invoke --function-name", "--cli-binary-format raw-in-base64-out", `"command":"stats"`,
		`"command":"republish"`, "OperatorFunctionArn", "amiss ledger stats -root s3://", "lambda:InvokeFunction"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/deployment.md does not show %q", want)
		}
	}
	// The S3 policies an operator signs in with: read-only, and republish (which revives and
	// queues, never deletes). Each covers the calls the ledger's read commands make.
	read, republish := docPolicy(t, doc, "read-only"), docPolicy(t, doc, "republish")
	for _, a := range []string{"s3:GetObject", "s3:ListBucket", "s3:GetBucketVersioning"} {
		if !read[a] || !republish[a] {
			t.Errorf("the operator policies lack %s (read-only %v, republish %v)", a, read[a], republish[a])
		}
	}
	for _, a := range []string{"s3:PutObject", "sqs:SendMessage"} {
		if read[a] || !republish[a] {
			t.Errorf("%s: in read-only %v, in republish %v; want only in republish", a, read[a], republish[a])
		}
	}
	for a := range republish {
		if strings.Contains(a, "Delete") || strings.HasSuffix(a, ":*") {
			t.Errorf("the republish policy allows %s", a)
		}
	}
}

// docPolicy reads the IAM policy docs/deployment.md shows after the marker <!-- policy: name -->.
func docPolicy(t *testing.T, doc, name string) map[string]bool {
	t.Helper()
	m := regexp.MustCompile("(?s)<!-- policy: " + regexp.QuoteMeta(name) + " -->\\s*```json\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/deployment.md shows no %s policy", name)
	}
	var p struct {
		Statement []struct {
			Action json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(m[1]), &p); err != nil {
		t.Fatalf("the %s policy is not JSON: %v", name, err)
	}
	out := map[string]bool{}
	for _, st := range p.Statement {
		var many []string
		if json.Unmarshal(st.Action, &many) != nil {
			var one string
			json.Unmarshal(st.Action, &one)
			many = []string{one}
		}
		for _, a := range many {
			out[a] = true
		}
	}
	return out
}

// The dashboard shows the deployment: webhooks by outcome, the API's answers with its 429s,
// verdicts by state (from the runner's log), publications, the queue and the ledger's waiting
// work, publication latency, and every function's errors and throttles. Every reference in
// its body is the template's own.
func TestTheDashboardShowsTheDeployment(t *testing.T) {
	raw := rawTemplate(t)
	body := child(child(child(child(raw, "Resources"), "Dashboard"), "Properties"), "DashboardBody")
	if body == nil || body.Tag != "!Sub" {
		t.Fatal("no dashboard with a !Sub body")
	}
	resources := map[string]bool{}
	for _, k := range keys(child(raw, "Resources")) {
		resources[k] = true
	}
	for _, ref := range regexp.MustCompile(`\$\{([A-Za-z:]+)(\.[A-Za-z]+)?\}`).FindAllStringSubmatch(body.Value, -1) {
		if !resources[ref[1]] && !strings.HasPrefix(ref[1], "AWS::") {
			t.Errorf("the dashboard refers to %s, not a resource of the template", ref[1])
		}
	}
	var d struct {
		Widgets []struct {
			Type       string
			Properties struct {
				Title   string
				Query   string
				Metrics [][]any
			}
		}
	}
	if err := json.Unmarshal([]byte(regexp.MustCompile(`\$\{[^}]+\}`).ReplaceAllString(body.Value, "X")), &d); err != nil {
		t.Fatalf("the dashboard's body is not JSON: %v", err)
	}
	shown := map[string]bool{}
	for _, w := range d.Widgets {
		for _, m := range w.Properties.Metrics {
			shown[fmt.Sprint(m[0], " ", m[1])] = true
		}
		if w.Type == "log" && strings.Contains(w.Properties.Query, `filter msg = "published"`) && strings.Contains(w.Properties.Query, "by state") {
			shown["verdicts by state"] = true
		}
	}
	var missing []string
	for _, want := range []string{"amiss admitted", "amiss unauthenticated", "amiss stale", "AWS/ApiGateway 4xx", "AWS/ApiGateway 5xx",
		"amiss webhooks_throttled", "verdicts by state", "amiss published", "amiss publish_refused", "amiss abandoned",
		"AWS/SQS ApproximateAgeOfOldestMessage", "amiss oldest_unfinished_age", "amiss publish_latency", "AWS/Lambda Errors",
		"AWS/Lambda Throttles", "amiss capacity_used_percent"} {
		if !shown[want] {
			missing = append(missing, want)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard does not show %v", missing)
	}
	if !strings.Contains(readFile(t, "functions/runner/publish.go"), `log.Info("published", "state", `) {
		t.Error("the runner's published line moved: update the dashboard's query")
	}
}

// The log groups (every function's and the access log) outlive the stack with KeepLogGroups
// (the default), through AWS::LanguageExtensions, which lets a parameter choose a
// DeletionPolicy and must come before the SAM transform.
func TestTheLogGroupsOutliveTheStackWhenAsked(t *testing.T) {
	raw := rawTemplate(t)
	if got := values(child(raw, "Transform")); got != "AWS::LanguageExtensions AWS::Serverless-2016-10-31" {
		t.Fatalf("Transform is %q", got)
	}
	if d := child(child(child(raw, "Parameters"), "KeepLogGroups"), "Default"); d == nil || d.Value != "Yes" {
		t.Error("KeepLogGroups does not default to Yes")
	}
	n := 0
	for _, kv := range pairsOf(child(raw, "Resources")) {
		if v := child(kv[1], "Type"); v == nil || v.Value != "AWS::Logs::LogGroup" {
			continue
		}
		n++
		for _, policy := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			v := child(kv[1], policy)
			if v == nil || v.Tag != "!If" || values(v) != "KeepLogGroups Retain Delete" {
				t.Errorf("%s's %s is %q, want !If [KeepLogGroups, Retain, Delete]", kv[0].Value, policy, values(v))
			}
		}
	}
	if n < 5 {
		t.Errorf("%d log groups: want each function's and the access log's", n)
	}
}

// Every binary the Makefile builds says which build it is: make build and every build-<Function>
// target stamp the version (git describe) and the commit (git rev-parse HEAD), which amiss
// version and each function's "starting" line print.
func TestEveryBuildIsStamped(t *testing.T) {
	mk := readFile(t, "Makefile")
	for _, re := range []string{
		`(?m)^VERSION\s+:= \$\(shell git describe --always --dirty 2>/dev/null\)$`,
		`(?m)^COMMIT\s+:= \$\(shell git rev-parse HEAD 2>/dev/null\)$`,
		`(?m)^STAMP\s+:= -X github\.com/amiss-ci/amiss/internal/buildinfo\.version=\$\(VERSION\) -X github\.com/amiss-ci/amiss/internal/buildinfo\.commit=\$\(COMMIT\)$`,
		`(?m)^LAMBDA_BUILD = .*-ldflags='-s -w \$\(STAMP\)'$`,
		`(?m)^\t\$\(GO\) build -ldflags "\$\(STAMP\)" -o bin/amiss \./cmd/amiss$`,
	} {
		if !regexp.MustCompile(re).MatchString(mk) {
			t.Errorf("the Makefile does not stamp the build: no line matching %s", re)
		}
	}
	targets := regexp.MustCompile(`(?m)^build-(\w+):\n(\t.*\n)+`).FindAllStringSubmatch(mk, -1)
	if len(targets) != 4 {
		t.Fatalf("%d build targets", len(targets))
	}
	for _, m := range targets {
		if !strings.Contains(m[0], "\t$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap") {
			t.Errorf("build-%s does not build with LAMBDA_BUILD", m[1])
		}
	}
	if boot := readFile(t, "functions/wiring/boot.go"); !strings.Contains(boot, `b.Log.Info("starting", "version", build.Version, "commit", build.Commit`) {
		t.Error("the functions' start-up line does not name the build")
	}
}

// make lint-template lints every variant docs/deployment.md names.
func TestEveryDocumentedVariantIsLinted(t *testing.T) {
	script := readFile(t, "scripts/lint-template.sh")
	doc := readFile(t, "docs/deployment.md")
	variants := regexp.MustCompile(`(?m)^variant ([a-z0-9-]+)`).FindAllStringSubmatch(script, -1)
	if len(variants) < 6 {
		t.Fatalf("%d variants linted", len(variants))
	}
	for _, v := range variants {
		if !strings.Contains(doc, "`"+v[1]+"`") {
			t.Errorf("docs/deployment.md does not name the linted variant %s", v[1])
		}
	}
}

// values lists the scalars under n, in order, space-separated.
func values(n *yaml.Node) string {
	var out []string
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		n = deref(n)
		if n == nil {
			return
		}
		if n.Kind == yaml.ScalarNode {
			out = append(out, n.Value)
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(out, " ")
}
