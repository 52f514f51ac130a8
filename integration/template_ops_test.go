package integration_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The template as an operator runs it: an alarm for each way the deployment fails, each
// telling the alarm topic as it fires and as it clears; bounds on the public endpoint and on
// each function's concurrency; the EFS variant deployable with no network of one's own; and
// no role reading what its function does not.

// deref follows a YAML alias.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// refsIn lists the parameters and resources n refers to with !Ref (sorted, once each, the
// pseudo parameters left out).
func refsIn(n *yaml.Node) []string {
	seen := map[string]bool{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		n = deref(n)
		if n == nil {
			return
		}
		if n.Tag == "!Ref" && n.Kind == yaml.ScalarNode && !strings.HasPrefix(n.Value, "AWS::") {
			seen[n.Value] = true
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	var out []string
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// functionEnv is the value of a function's variable: its own, else Globals'.
func functionEnv(raw *yaml.Node, fn, name string) *yaml.Node {
	if v := child(child(child(child(child(child(raw, "Resources"), fn), "Properties"), "Environment"), "Variables"), name); v != nil {
		return v
	}
	return child(child(child(child(child(raw, "Globals"), "Function"), "Environment"), "Variables"), name)
}

// statements lists the IAM statements of a function's role; a statement under !If is taken
// from its first branch (the one its condition grants).
func statements(t *testing.T, raw *yaml.Node, fn string) []*yaml.Node {
	t.Helper()
	role := child(child(child(raw, "Resources"), fn), "Properties")
	ref := child(role, "Role")
	if ref == nil || ref.Tag != "!GetAtt" {
		t.Fatalf("%s: Role is not !GetAtt ROLE.Arn", fn)
	}
	name, _ := strings.CutSuffix(ref.Value, ".Arn")
	var out []*yaml.Node
	for _, p := range child(child(child(child(raw, "Resources"), name), "Properties"), "Policies").Content {
		for _, st := range child(child(p, "PolicyDocument"), "Statement").Content {
			st = deref(st)
			if st.Tag == "!If" {
				st = deref(st.Content[1])
			}
			if st.Kind == yaml.MappingNode {
				out = append(out, st)
			}
		}
	}
	return out
}

// statementActions lists a statement's actions.
func statementActions(st *yaml.Node) []string {
	acts := map[string]bool{}
	actions(st, acts)
	var out []string
	for a := range acts {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// secretGrants lists what a function's role may read from Secrets Manager, by the parameters
// its statements name.
func secretGrants(t *testing.T, raw *yaml.Node, fn string) []string {
	var refs []string
	for _, st := range statements(t, raw, fn) {
		for _, a := range statementActions(st) {
			if a == "secretsmanager:GetSecretValue" {
				refs = append(refs, refsIn(child(st, "Resource"))...)
			}
		}
	}
	sort.Strings(refs)
	return refs
}

// sqsGrants lists the actions a function's role may call on the resource !GetAtt res names.
func sqsGrants(t *testing.T, raw *yaml.Node, fn, res string) []string {
	var out []string
	for _, st := range statements(t, raw, fn) {
		if r := child(st, "Resource"); r != nil && r.Tag == "!GetAtt" && r.Value == res {
			out = append(out, statementActions(st)...)
		}
	}
	sort.Strings(out)
	return out
}

// alarm is one AWS::CloudWatch::Alarm of the template.
type alarm struct {
	name  string
	props *yaml.Node
}

func (a alarm) get(k string) string {
	v := child(a.props, k)
	if v == nil {
		return ""
	}
	if v.Tag == "!Ref" || v.Tag == "!GetAtt" {
		return v.Tag + " " + v.Value
	}
	return v.Value
}

// dims renders the alarm's dimensions as Name=Value (a !Ref or !GetAtt as its tag and target).
func (a alarm) dims() string {
	var out []string
	dims := deref(child(a.props, "Dimensions"))
	if dims == nil {
		return ""
	}
	for _, d := range dims.Content {
		v := child(d, "Value")
		val := v.Value
		if v.Tag == "!Ref" || v.Tag == "!GetAtt" {
			val = v.Tag + " " + v.Value
		}
		out = append(out, child(d, "Name").Value+"="+val)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func alarms(raw *yaml.Node) []alarm {
	var out []alarm
	for _, kv := range pairsOf(child(raw, "Resources")) {
		if v := child(kv[1], "Type"); v != nil && v.Value == "AWS::CloudWatch::Alarm" {
			out = append(out, alarm{kv[0].Value, child(kv[1], "Properties")})
		}
	}
	return out
}

// scheduleMinutes is the cleanup's schedule period.
func scheduleMinutes(t *testing.T, raw *yaml.Node) int {
	t.Helper()
	expr := child(child(child(child(child(child(raw, "Resources"), "CleanupFunction"), "Properties"), "Events"), "Every5Minutes"), "Properties")
	m := regexp.MustCompile(`^rate\((\d+) minutes\)$`).FindStringSubmatch(child(expr, "ScheduleExpression").Value)
	if m == nil {
		t.Fatal("the cleanup's schedule is not rate(N minutes)")
	}
	var n int
	fmt.Sscan(m[1], &n)
	return n
}

// Each way the deployment fails has an alarm: every function's errors and throttles, the
// HTTP API's 5xx answers and its stage's 429s, a message no runner takes, work waiting in the
// ledger (the oldest unfinished row), publications refused and verdicts abandoned, the
// ledger's capacity near its cap, the cleanup not running, and a dead letter no row explains.
// The alarms on amiss's own metrics watch the names and dimensions the code emits.
func TestEachFailureHasItsAlarm(t *testing.T) {
	raw := rawTemplate(t)
	type want struct{ namespace, metric, dims, statistic, comparison, threshold, missing string }
	cleanupDims := "Function=cleanup,FunctionName=!Ref CleanupFunction"
	runnerDims := "Function=runner,FunctionName=!Ref RunnerFunction"
	wants := map[string]want{
		"ApiServerErrorsAlarm":    {"AWS/ApiGateway", "5xx", "ApiId=!Ref HttpApi", "Sum", "GreaterThanThreshold", "0", "notBreaching"},
		"ApiThrottledAlarm":       {"amiss", "webhooks_throttled", "ApiId=!Ref HttpApi", "Sum", "GreaterThanThreshold", "0", "notBreaching"},
		"DeliveryQueueAgeAlarm":   {"AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName=!GetAtt DeliveryQueue.QueueName", "Maximum", "GreaterThanThreshold", "!Ref QueueAgeAlarmSeconds", "notBreaching"},
		"CapacityAlarm":           {"amiss", "capacity_used_percent", cleanupDims, "Maximum", "GreaterThanOrEqualToThreshold", "!Ref CapacityAlarmPercent", "ignore"},
		"CleanupNotRunningAlarm":  {"amiss", "cleanup_succeeded", cleanupDims, "Sum", "LessThanThreshold", "1", "ignore"},
		"DeadLetterAlarm":         {"amiss", "dead_letters_unexplained", cleanupDims, "Maximum", "GreaterThanThreshold", "0", "ignore"},
		"OldestUnfinishedAlarm":   {"amiss", "oldest_unfinished_age", cleanupDims, "Maximum", "GreaterThanThreshold", "!Ref UnfinishedAlarmSeconds", "ignore"},
		"PublicationRefusedAlarm": {"amiss", "publish_refused", runnerDims, "Sum", "GreaterThanThreshold", "0", "notBreaching"},
		"AbandonedAlarm":          {"amiss", "abandoned", runnerDims, "Sum", "GreaterThanThreshold", "0", "notBreaching"},
	}
	for _, fn := range []string{"Ingress", "Runner", "Cleanup"} {
		wants[fn+"ErrorsAlarm"] = want{"AWS/Lambda", "Errors", "FunctionName=!Ref " + fn + "Function", "Sum", "GreaterThanThreshold", "0", "notBreaching"}
		wants[fn+"ThrottlesAlarm"] = want{"AWS/Lambda", "Throttles", "FunctionName=!Ref " + fn + "Function", "Sum", "GreaterThanThreshold", "0", "notBreaching"}
	}
	found := map[string]bool{}
	for _, a := range alarms(raw) {
		w, ok := wants[a.name]
		if !ok {
			continue
		}
		found[a.name] = true
		got := want{a.get("Namespace"), a.get("MetricName"), a.dims(), a.get("Statistic"), a.get("ComparisonOperator"), a.get("Threshold"), a.get("TreatMissingData")}
		if got != w {
			t.Errorf("%s watches %+v, want %+v", a.name, got, w)
		}
	}
	for name := range wants {
		if !found[name] {
			t.Errorf("no %s", name)
		}
	}

	// The code emits those metrics, under the namespace and dimensions the alarms read: the
	// cleanup its gauges, the runner its counts, each function through wiring.Metrics named
	// after its role.
	for file, names := range map[string][]string{
		"functions/cleanup/cleanup.go": {"capacity_used_percent", "cleanup_succeeded", "dead_letters_unexplained", "oldest_unfinished_age"},
		"functions/runner/publish.go":  {"publish_refused", "abandoned"},
	} {
		code := readFile(t, file)
		for _, m := range names {
			if !strings.Contains(code, `"`+m+`"`) {
				t.Errorf("%s emits no %s", file, m)
			}
		}
	}
	for _, fn := range []string{"ingress", "runner", "cleanup"} {
		if main := readFile(t, "functions/cmd/"+fn+"/main.go"); !strings.Contains(main, `wiring.Metrics(os.Stdout, "`+fn+`")`) {
			t.Errorf("the %s's metrics are not wiring.Metrics(os.Stdout, %q)", fn, fn)
		}
	}
	if m := readFile(t, "functions/wiring/metrics.go"); !strings.Contains(m, `Namespace: "amiss"`) ||
		!strings.Contains(m, `"Function": function`) || !strings.Contains(m, `dims["FunctionName"] = name`) {
		t.Error("wiring.Metrics does not emit namespace amiss with the dimensions Function and FunctionName")
	}

	// "Not running" waits for more than two schedule periods without a finished pass, so a
	// run that comes late or finds maintenance held does not raise it alone.
	for _, a := range alarms(raw) {
		if a.name == "CleanupNotRunningAlarm" {
			var period, evals int
			fmt.Sscan(a.get("Period"), &period)
			fmt.Sscan(a.get("EvaluationPeriods"), &evals)
			if period*evals <= 2*60*scheduleMinutes(t, raw) {
				t.Errorf("CleanupNotRunningAlarm looks at %d s: not more than two schedule periods", period*evals)
			}
		}
	}
}

// Every alarm tells AlarmTopicArn as it fires and as it clears, and has no action at all when
// the parameter is empty; each has a runbook entry, named by its logical id.
func TestEveryAlarmTellsTheTopicAsItFiresAndClears(t *testing.T) {
	raw := rawTemplate(t)
	cond := child(child(raw, "Conditions"), "HasAlarmTopic")
	if cond == nil || cond.Tag != "!Not" || deref(cond.Content[0]).Tag != "!Equals" ||
		strings.Join(refsIn(cond), ",") != "AlarmTopicArn" || deref(cond.Content[0]).Content[1].Value != "" {
		t.Fatal(`HasAlarmTopic is not !Not [!Equals [!Ref AlarmTopicArn, ""]]`)
	}
	runbook := readFile(t, "docs/deployment.md")
	all := alarms(raw)
	if len(all) < 11 {
		t.Fatalf("%d alarms", len(all))
	}
	for _, a := range all {
		for _, k := range []string{"AlarmActions", "OKActions"} {
			v := deref(child(a.props, k))
			if v == nil || v.Tag != "!If" || v.Content[0].Value != "HasAlarmTopic" || v.Content[1].Kind != yaml.SequenceNode ||
				len(v.Content[1].Content) != 1 || v.Content[1].Content[0].Tag != "!Ref" || v.Content[1].Content[0].Value != "AlarmTopicArn" ||
				v.Content[2].Tag != "!Ref" || v.Content[2].Value != "AWS::NoValue" {
				t.Errorf("%s: %s is not !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]", a.name, k)
			}
		}
		if !strings.Contains(runbook, "`"+a.name+"`") {
			t.Errorf("docs/deployment.md has no runbook entry for %s", a.name)
		}
	}
}

// The public endpoint and the functions are bounded: the HTTP API's stage throttles every
// route; with ReserveConcurrency each function has its own reserved concurrency (the runner's
// equal to its SQS maximum concurrency, so the queue's poller is never throttled; one cleanup
// at a time); the cleanup is never retried by Lambda and ends before its schedule's next run.
func TestTheEndpointAndTheFunctionsAreBounded(t *testing.T) {
	raw := rawTemplate(t)
	res := child(raw, "Resources")
	routes := child(child(child(res, "HttpApi"), "Properties"), "DefaultRouteSettings")
	for k, param := range map[string]string{"ThrottlingRateLimit": "ApiThrottlingRateLimit", "ThrottlingBurstLimit": "IngressReservedConcurrency"} {
		if v := child(routes, k); v == nil || v.Tag != "!Ref" || v.Value != param {
			t.Errorf("the HTTP API's %s is not !Ref %s", k, param)
		}
		if child(child(raw, "Parameters"), param) == nil {
			t.Errorf("no parameter %s", param)
		}
	}
	if cond := child(child(raw, "Conditions"), "ReserveConcurrency"); strings.Join(refsIn(cond), ",") != "ReserveConcurrency" {
		t.Error("the ReserveConcurrency condition does not read the ReserveConcurrency parameter")
	}
	for fn, want := range map[string]string{"IngressFunction": "!Ref IngressReservedConcurrency", "RunnerFunction": "!Ref RunnerMaxConcurrency", "CleanupFunction": "1"} {
		v := child(child(child(res, fn), "Properties"), "ReservedConcurrentExecutions")
		if v == nil || v.Tag != "!If" || v.Content[0].Value != "ReserveConcurrency" || v.Content[2].Value != "AWS::NoValue" {
			t.Errorf("%s: ReservedConcurrentExecutions is not !If [ReserveConcurrency, N, !Ref AWS::NoValue]", fn)
			continue
		}
		got := v.Content[1].Value
		if v.Content[1].Tag == "!Ref" {
			got = "!Ref " + got
		}
		if got != want {
			t.Errorf("%s reserves %s, want %s", fn, got, want)
		}
	}
	scaling := child(child(child(child(child(child(res, "RunnerFunction"), "Properties"), "Events"), "Deliveries"), "Properties"), "ScalingConfig")
	if v := child(scaling, "MaximumConcurrency"); v == nil || v.Tag != "!Ref" || v.Value != "RunnerMaxConcurrency" {
		t.Error("the runner's SQS maximum concurrency is not RunnerMaxConcurrency, its reservation")
	}

	cleanup := child(child(res, "CleanupFunction"), "Properties")
	if v := child(child(cleanup, "EventInvokeConfig"), "MaximumRetryAttempts"); v == nil || v.Value != "0" {
		t.Error("Lambda retries a failed cleanup run (the next one comes with the schedule)")
	}
	var timeout int
	fmt.Sscan(child(cleanup, "Timeout").Value, &timeout)
	period := 60 * scheduleMinutes(t, raw)
	if timeout <= 0 || timeout >= period {
		t.Errorf("the cleanup's timeout %d s is not shorter than its schedule's period %d s", timeout, period)
	}
	// The dead letters a run reads stay hidden for the rest of the run (so it reads each once)
	// and no longer than the period (so the next run reads again what it kept).
	m := regexp.MustCompile(`hide = (\d+) \* time\.Minute`).FindStringSubmatch(readFile(t, "functions/cleanup/deadletters.go"))
	var hide int
	if m != nil {
		fmt.Sscan(m[1], &hide)
	}
	if hide*60 < timeout || hide*60 >= period {
		t.Errorf("dead letters are hidden %d min by default: want from the cleanup's timeout (%d s) to below its period (%d s)", hide, timeout, period)
	}
}

// The EFS variant deploys with no network of one's own: without EfsSubnetA, EfsSubnetB and
// EfsSecurityGroup the stack creates a VPC with two private subnets in two availability zones,
// the security group (NFS from itself), and endpoints for the AWS services the functions call;
// Rules refuse a network given in part. The file system requires IAM and TLS, and is backed up.
func TestTheEFSVariantNeedsNoNetworkOfItsOwn(t *testing.T) {
	raw := rawTemplate(t)
	res := child(raw, "Resources")
	conds := child(raw, "Conditions")
	if c := child(conds, "EfsCreateNetwork"); c == nil || !strings.Contains(yamlString(t, c), "!Condition EfsGivenNetwork") {
		t.Fatal("EfsCreateNetwork is not the EFS variant without a given network")
	}
	if got := strings.Join(refsIn(child(conds, "EfsGivenNetwork")), ","); got != "EfsSecurityGroup,EfsSubnetA,EfsSubnetB" {
		t.Fatalf("EfsGivenNetwork reads %s, want the three network parameters", got)
	}
	created := map[string][]*yaml.Node{}
	for _, kv := range pairsOf(res) {
		if c := child(kv[1], "Condition"); c != nil && (c.Value == "EfsCreateNetwork" || c.Value == "EfsCreateNat") {
			created[child(kv[1], "Type").Value] = append(created[child(kv[1], "Type").Value], child(kv[1], "Properties"))
		}
	}
	if len(created["AWS::EC2::VPC"]) != 1 {
		t.Fatal("the EFS variant creates no VPC")
	}
	zones := map[string]bool{}
	for _, s := range created["AWS::EC2::Subnet"] {
		if v := child(s, "MapPublicIpOnLaunch"); v != nil && v.Value == "true" {
			continue
		}
		zones[yamlString(t, child(s, "AvailabilityZone"))] = true
	}
	if len(zones) < 2 {
		t.Errorf("the created subnets are in %d availability zones", len(zones))
	}
	nfs := false
	for _, r := range created["AWS::EC2::SecurityGroupIngress"] {
		if child(r, "FromPort").Value == "2049" && child(r, "ToPort").Value == "2049" &&
			yamlString(t, child(r, "GroupId")) == yamlString(t, child(r, "SourceSecurityGroupId")) {
			nfs = true
		}
	}
	if !nfs {
		t.Error("the created security group does not allow NFS (2049) from itself")
	}
	// The functions' AWS clients (functions/wiring) in the EFS variant: SQS and Secrets Manager.
	wiring := readFile(t, "functions/wiring/wiring.go")
	services := map[string]bool{}
	for _, e := range created["AWS::EC2::VPCEndpoint"] {
		name := child(e, "ServiceName").Value
		services[name[strings.LastIndex(name, ".")+1:]] = child(e, "PrivateDnsEnabled").Value == "true"
	}
	for _, svc := range []string{"sqs", "secretsmanager"} {
		if !strings.Contains(wiring, svc+".NewFromConfig(") {
			t.Fatalf("the functions no longer call %s: update this test", svc)
		}
		if !services[svc] {
			t.Errorf("no VPC endpoint with private DNS for %s", svc)
		}
	}
	// The functions wait for the endpoints (through the handle they depend on), so no first
	// run finds SQS or Secrets Manager out of reach.
	waits := map[string]bool{}
	for _, fn := range []string{"IngressFunction", "RunnerFunction", "CleanupFunction"} {
		h := child(child(res, fn), "DependsOn")
		for _, kv := range pairsOf(child(child(res, h.Value), "Metadata")) {
			if kv[1].Tag == "!If" && kv[1].Content[1].Tag == "!Ref" {
				waits[fn+" "+kv[1].Content[1].Value] = true
			}
		}
		for _, kv := range pairsOf(res) {
			if v := child(kv[1], "Type"); v != nil && v.Value == "AWS::EC2::VPCEndpoint" && !waits[fn+" "+kv[0].Value] {
				t.Errorf("%s does not wait for %s", fn, kv[0].Value)
			}
		}
	}
	for _, mt := range []string{"LedgerMountTargetA", "LedgerMountTargetB"} {
		v := child(child(child(res, mt), "Properties"), "SubnetId")
		if v == nil || v.Tag != "!If" || v.Content[0].Value != "EfsGivenNetwork" {
			t.Errorf("%s does not take the created subnet when none is given", mt)
		}
	}

	rules := yamlString(t, child(raw, "Rules"))
	for _, p := range []string{"EfsSubnetA", "EfsSubnetB", "EfsSecurityGroup"} {
		if !strings.Contains(rules, "!Ref "+p) {
			t.Errorf("no Rule checks %s", p)
		}
	}
	fs := child(child(res, "LedgerFileSystem"), "Properties")
	if v := child(child(fs, "BackupPolicy"), "Status"); v == nil || v.Value != "ENABLED" {
		t.Error("the ledger's file system is not backed up")
	}
	// A Deny of any request without TLS, and an Allow only through a mount target (with a
	// policy, a client that does not authenticate with IAM is refused).
	found := map[string]bool{}
	for _, st := range child(child(fs, "FileSystemPolicy"), "Statement").Content {
		for k, v := range map[string]string{"aws:SecureTransport": "false", "elasticfilesystem:AccessedViaMountTarget": "true"} {
			if c := child(child(child(st, "Condition"), "Bool"), k); c != nil && c.Value == v {
				found[child(st, "Effect").Value+" "+k] = true
			}
		}
	}
	if !found["Deny aws:SecureTransport"] || !found["Allow elasticfilesystem:AccessedViaMountTarget"] {
		t.Errorf("the file system policy does not refuse requests without TLS and allow only IAM clients through a mount target: %v", found)
	}
}

// A customer-managed key decrypts secrets only through Secrets Manager, for the three functions
// that read secrets (the cleanup: catch-up's credentials); X-Ray's write access comes only with
// active tracing.
func TestKeysAndTracingAreGrantedOnlyWhenUsed(t *testing.T) {
	raw := rawTemplate(t)
	for fn, wantKey := range map[string]bool{"IngressFunction": true, "RunnerFunction": true, "CleanupFunction": true} {
		key := false
		for _, st := range statements(t, raw, fn) {
			if strings.Join(statementActions(st), ",") == "kms:Decrypt" {
				key = true
				if cond := yamlString(t, child(st, "Condition")); !strings.Contains(cond, "kms:ViaService") || !strings.Contains(cond, "secretsmanager.") {
					t.Errorf("%s may decrypt with the key outside Secrets Manager", fn)
				}
			}
		}
		if key != wantKey {
			t.Errorf("%s may decrypt with SecretsKmsKeyArn: %v, want %v", fn, key, wantKey)
		}
	}
	for _, role := range []string{"IngressRole", "RunnerRole", "CleanupRole"} {
		xray := 0
		for _, a := range deref(child(child(child(child(raw, "Resources"), role), "Properties"), "ManagedPolicyArns")).Content {
			if strings.Contains(yamlString(t, a), "XRay") {
				if a.Tag != "!If" || a.Content[0].Value != "TracingActive" || !strings.HasSuffix(a.Content[1].Value, ":iam::aws:policy/AWSXRayDaemonWriteAccess") {
					t.Errorf("%s: X-Ray access outside !If [TracingActive, ...]", role)
				}
				xray++
			}
		}
		if xray != 1 {
			t.Errorf("%s: %d X-Ray grants, want one under TracingActive", role, xray)
		}
	}
}

// yamlString renders a node as YAML (aliases resolved by the encoder).
func yamlString(t *testing.T, n *yaml.Node) string {
	t.Helper()
	if n == nil {
		return ""
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
