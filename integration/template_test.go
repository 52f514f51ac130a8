package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/functions/operator"
	"github.com/amiss-ci/amiss/functions/queue"
	"github.com/amiss-ci/amiss/functions/webhook"
	"github.com/amiss-ci/amiss/internal/samtemplate"
	"github.com/amiss-ci/amiss/ledger"
	"go.yaml.in/yaml/v3"
)

// The template checks: every function's build target exists; the environment the code reads
// and the one the template sets are the same; each function's event matches its handler; and
// the IAM policies cover the S3 and SQS calls the code makes.

const root = ".."

// localOnly are variables the code reads that a deployment leaves unset on purpose.
var localOnly = map[string]string{
	"AMISS_CONFIG": "defaults to amiss.yaml beside the bootstrap, where sam build puts the packaged configuration",
}

// deployConfig is the configuration the build targets package (the Makefile's DEPLOY_CONFIG).
func deployConfig(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^DEPLOY_CONFIG\s*\?=\s*(\S+)`).FindStringSubmatch(readFile(t, "Makefile"))
	if m == nil {
		t.Fatal("the Makefile sets no DEPLOY_CONFIG")
	}
	return m[1]
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goformationUnknown are the properties SAM takes and goformation's schema (its last release,
// 7.14) predates, by resource type: they are removed before goformation reads the template,
// and checked on the raw template instead (template_ops_test.go).
var goformationUnknown = map[string][]string{
	"AWS::Serverless::Function": {"LoggingConfig"},
	"AWS::Serverless::HttpApi":  {"AccessLogSettings"},
}

// openTemplate reads template.yaml with goformation, which checks every resource's properties
// against the CloudFormation and SAM schemas (an unknown property is an error), except for
// goformationUnknown.
func openTemplate(t *testing.T) (*cloudformation.Template, error) {
	t.Helper()
	doc := rawTemplate(t)
	for _, kv := range pairsOf(child(doc, "Resources")) {
		v := child(kv[1], "Type")
		if v == nil || goformationUnknown[v.Value] == nil {
			continue
		}
		props := child(kv[1], "Properties")
		for _, name := range goformationUnknown[v.Value] {
			for i := 0; i+1 < len(props.Content); i += 2 {
				if props.Content[i].Value == name {
					props.Content = append(props.Content[:i], props.Content[i+2:]...)
					break
				}
			}
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return goformation.ParseYAML(b)
}

// rawTemplate is template.yaml as YAML nodes (CloudFormation's short tags kept as tags).
func rawTemplate(t *testing.T) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(readFile(t, "template.yaml")), &doc); err != nil {
		t.Fatalf("template.yaml: %v", err)
	}
	return doc.Content[0]
}

func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func keys(n *yaml.Node) []string {
	var out []string
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, n.Content[i].Value)
		}
	}
	return out
}

// actions collects every IAM action under n (Action: x or Action: [x, y]).
func actions(n *yaml.Node, into map[string]bool) {
	if n == nil {
		return
	}
	if n.Kind == yaml.AliasNode {
		actions(n.Alias, into)
		return
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "Action" {
				v := n.Content[i+1]
				if v.Kind == yaml.ScalarNode {
					into[v.Value] = true
				}
				for _, a := range v.Content {
					into[a.Value] = true
				}
				continue
			}
			actions(n.Content[i+1], into)
		}
		return
	}
	for _, c := range n.Content {
		actions(c, into)
	}
}

func TestTemplate(t *testing.T) {
	tpl, err := openTemplate(t)
	if err != nil {
		t.Fatalf("goformation cannot read template.yaml: %v", err)
	}
	funcs := tpl.GetAllServerlessFunctionResources()
	want := map[string]struct {
		cmd, event, handlerMark string
	}{
		"IngressFunction": {"ingress", "HttpApi", "ingress.Handler"},
		"RunnerFunction":  {"runner", "SQS", "events.SQSEvent"},
		"CleanupFunction": {"cleanup", "ScheduleV2", "cleanup.Handler"},
		// Invoked by an operator with the AWS CLI: no event, no configuration packaged.
		"OperatorFunction": {"operator", "", "operator.Handler"},
	}
	if len(funcs) != len(want) {
		t.Fatalf("template functions %v", keys(child(rawTemplate(t), "Resources")))
	}
	makefile := readFile(t, "Makefile")
	for name, w := range want {
		f := funcs[name]
		if f == nil {
			t.Fatalf("%s missing", name)
		}
		// The build target exists and builds the function's main package.
		// The build target checks the packaged configuration against the template, then builds
		// the function's main package and puts the configuration beside it.
		target := regexp.MustCompile(`(?m)^build-` + name + `:\n\t\$\(AT_ROOT\)\n\t\$\(PACKAGE_CHECK\) ` + name + `\b.*\n\t\$\(LAMBDA_BUILD\) -o \$\(ARTIFACTS_DIR\)/bootstrap \./functions/cmd/` + w.cmd + `\n\tcp \$\(DEPLOY_CONFIG\) \$\(ARTIFACTS_DIR\)/amiss.yaml\n`)
		if w.event == "" {
			target = regexp.MustCompile(`(?m)^build-` + name + `:\n\t\$\(AT_ROOT\)\n\t\$\(LAMBDA_BUILD\) -o \$\(ARTIFACTS_DIR\)/bootstrap \./functions/cmd/` + w.cmd + `\n`)
		}
		if !target.MatchString(makefile) {
			t.Fatalf("Makefile has no build-%s target checking the packaged configuration and building ./functions/cmd/%s", name, w.cmd)
		}
		if !regexp.MustCompile(`(?m)^PACKAGE_CHECK = \$\(GO\) run \./cmd/amiss check -template template\.yaml -config \$\(DEPLOY_CONFIG\) -function$`).MatchString(makefile) {
			t.Fatal("PACKAGE_CHECK is not amiss check -template template.yaml -config $(DEPLOY_CONFIG) -function")
		}
		// sam build copies only the function's own main package (its CodeUri) and runs the
		// target at the repository's root, where the module is; run anywhere else the target
		// stops with the remedy.
		fn := child(child(rawTemplate(t), "Resources"), name)
		if v := child(child(fn, "Properties"), "CodeUri"); v == nil || v.Value != "functions/cmd/"+w.cmd {
			t.Fatalf("%s's CodeUri is not its own main package functions/cmd/%s", name, w.cmd)
		}
		meta := child(fn, "Metadata")
		for k, want := range map[string]string{"BuildMethod": "makefile", "ContextPath": ".", "WorkingDirectory": "."} {
			if v := child(meta, k); v == nil || v.Value != want {
				t.Fatalf("%s's Metadata %s is not %q", name, k, want)
			}
		}
		if !regexp.MustCompile(`(?m)^AT_ROOT = @test -f go\.mod .*exit 1; }$`).MatchString(makefile) {
			t.Fatal("AT_ROOT does not stop a build outside the repository's root")
		}
		main := readFile(t, "functions/cmd/"+w.cmd+"/main.go")
		if !strings.Contains(main, "package main") || !strings.Contains(main, "lambda.Start") {
			t.Fatalf("functions/cmd/%s is not a Lambda main", w.cmd)
		}
		// The event matches the handler.
		if w.event == "" {
			if len(f.Events) != 0 || !strings.Contains(main, w.handlerMark) {
				t.Fatalf("%s: %d events, a main using %q: want none, as only an operator invokes it", name, len(f.Events), w.handlerMark)
			}
			continue
		}
		if len(f.Events) != 1 {
			t.Fatalf("%s has %d events", name, len(f.Events))
		}
		for _, e := range f.Events {
			if e.Type != w.event || !strings.Contains(main, w.handlerMark) {
				t.Fatalf("%s: event %s for a main using %q (want %s)", name, e.Type, w.handlerMark, w.event)
			}
		}
	}
	raw := rawTemplate(t)
	runnerEvent := child(child(child(child(child(child(raw, "Resources"), "RunnerFunction"), "Properties"), "Events"), "Deliveries"), "Properties")
	if v := child(runnerEvent, "FunctionResponseTypes"); v == nil || len(v.Content) != 1 || v.Content[0].Value != "ReportBatchItemFailures" {
		t.Fatal("the runner's SQS event does not report batch item failures")
	}
	if child(child(runnerEvent, "ScalingConfig"), "MaximumConcurrency") == nil {
		t.Fatal("the runner's SQS event has no maximum concurrency")
	}
	if v := child(child(child(raw, "Resources"), "HttpApi"), "Type"); v == nil || v.Value != "AWS::Serverless::HttpApi" {
		t.Fatal("no HTTP API")
	}
	globals := child(child(raw, "Globals"), "Function")
	if child(globals, "Runtime").Value != "provided.al2023" || child(globals, "Architectures").Content[0].Value != "arm64" ||
		child(globals, "Handler").Value != "bootstrap" {
		t.Fatal("functions are not bootstrap on provided.al2023 arm64")
	}
}

func TestEnvironmentReadIsEnvironmentSet(t *testing.T) {
	raw := rawTemplate(t)
	set := map[string]bool{}
	for _, k := range keys(child(child(child(child(raw, "Globals"), "Function"), "Environment"), "Variables")) {
		set[k] = true
	}
	for _, name := range keys(child(raw, "Resources")) {
		for _, k := range keys(child(child(child(child(child(raw, "Resources"), name), "Properties"), "Environment"), "Variables")) {
			set[k] = true
		}
	}
	read := map[string]bool{}
	lit := regexp.MustCompile(`"(AMISS_[A-Z0-9_]+)"`)
	filepath.WalkDir(filepath.Join(root, "functions"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			read[m[1]] = true
		}
		return nil
	})
	if len(read) == 0 {
		t.Fatal("found no environment variable read by the functions")
	}
	// The packaged configuration's ${NAME} and env:NAME are read too: Lambda sets only what
	// the template declares, so each one must be set (defect: a default deploy refused every
	// webhook because the configuration read variables the template never set).
	uses, err := config.EnvUses([]byte(readFile(t, deployConfig(t))))
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) == 0 {
		t.Fatalf("%s reads no variable: where do its secrets come from?", deployConfig(t))
	}
	for _, u := range uses {
		if u.Secret {
			t.Errorf("%s: %s reads a secret from env:%s; the packaged configuration takes its secrets from Secrets Manager", deployConfig(t), u.Path, u.Name)
		}
		read[u.Name] = true
	}
	for v := range read {
		if !set[v] && localOnly[v] == "" {
			t.Errorf("the code reads %s but template.yaml never sets it", v)
		}
	}
	for v := range set {
		if !read[v] {
			t.Errorf("template.yaml sets %s but no function reads it", v)
		}
	}
}

// s3Calls maps the S3 API calls the ledger makes to IAM actions.
var s3Calls = map[string]string{"GetObject": "s3:GetObject", "PutObject": "s3:PutObject", "DeleteObject": "s3:DeleteObjectVersion",
	"ListObjectsV2": "s3:ListBucket", "NewListObjectsV2Paginator": "s3:ListBucket",
	"NewListObjectVersionsPaginator": "s3:ListBucketVersions", "GetBucketVersioning": "s3:GetBucketVersioning"}

// cleanupOnly are the S3 actions only cleanup needs: deletions by version, and the listing of
// versions that precedes them.
var cleanupOnly = map[string]bool{"s3:DeleteObjectVersion": true, "s3:ListBucketVersions": true}

func TestPoliciesCoverTheCallsTheCodeMakes(t *testing.T) {
	raw := rawTemplate(t)
	// Each function runs with a role of the template's own (SAM would attach the VPC policy to
	// a generated role in the S3 variant too): its actions are that role's.
	policy := func(fn string) map[string]bool {
		props := child(child(child(raw, "Resources"), fn), "Properties")
		if child(props, "Policies") != nil {
			t.Fatalf("%s has SAM Policies: its generated role would carry the VPC policy in the S3 variant", fn)
		}
		role := child(props, "Role")
		if role == nil || role.Tag != "!GetAtt" {
			t.Fatalf("%s: Role is not !GetAtt ROLE.Arn", fn)
		}
		name, _ := strings.CutSuffix(role.Value, ".Arn")
		out := map[string]bool{}
		actions(child(child(child(child(raw, "Resources"), name), "Properties"), "Policies"), out)
		return out
	}
	// S3: every call of objstore's store; the ledger is used by all three functions, and
	// deletion only by cleanup (the store's deleting and version-listing methods are called
	// from objstore/cleanup.go only), and only by version id.
	store := readFile(t, "objstore/store.go")
	if n, v := strings.Count(store, "DeleteObjectInput{"), strings.Count(store, "VersionId: aws.String(version)"); n != 1 || v != 1 {
		t.Fatalf("objstore/store.go builds %d DeleteObject inputs, %d with a version id: every delete must name a version", n, v)
	}
	called := map[string]bool{}
	for call, action := range s3Calls {
		if regexp.MustCompile(`\b` + call + `\(`).MatchString(store) {
			called[action] = true
		}
	}
	// GetObject of a missing key answers 403 without ListBucket: every function needs it.
	called["s3:ListBucket"] = true
	sources, err := filepath.Glob(filepath.Join(root, "objstore", "*.go"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("objstore sources: %v", err)
	}
	for _, path := range sources {
		f := filepath.Join("objstore", filepath.Base(path))
		if strings.HasSuffix(f, "_test.go") || f == filepath.Join("objstore", "cleanup.go") || f == filepath.Join("objstore", "store.go") {
			continue
		}
		src := readFile(t, f)
		for _, m := range []string{"deleteVersion(", "removeVersion(", "dropIndex(", ".versions(", "listIndex("} {
			if strings.Contains(src, m) {
				t.Fatalf("%s calls %s: the policies assume only cleanup deletes or lists versions", f, m)
			}
		}
	}
	for _, fn := range []string{"IngressFunction", "RunnerFunction", "CleanupFunction", "OperatorFunction"} {
		p := policy(fn)
		if p["s3:DeleteObject"] {
			t.Errorf("%s may delete ledger objects by key; the ledger deletes only by version", fn)
		}
		for action := range called {
			if cleanupOnly[action] && fn != "CleanupFunction" {
				if p[action] {
					t.Errorf("%s has %s; only cleanup needs it", fn, action)
				}
				continue
			}
			if !p[action] {
				t.Errorf("%s lacks %s, which the ledger calls", fn, action)
			}
		}
	}
	// Secrets: each function's role reads only the secrets the function reads (its
	// wiring.SecretSet): the ingress the webhook secrets, the runner the evaluator secrets and
	// publish tokens, the cleanup catch-up's credentials, the operator none; and each function's
	// AMISS_SECRET_ARNS, against which it checks its configuration at start, names what its role
	// may read.
	for fn, want := range map[string]struct{ set, grant, env string }{
		"IngressFunction":  {"wiring.WebhookSecrets", "ExtraWebhookSecretArns,WebhookSecretArn", "ExtraWebhookSecretArns,WebhookSecretArn"},
		"RunnerFunction":   {"wiring.RunnerSecrets", "SecretArns", "SecretArns"},
		"CleanupFunction":  {"wiring.CatchUpSecrets", "CatchUpSecretArns", "CatchUpSecretArns"},
		"OperatorFunction": {"", "", ""},
	} {
		main := readFile(t, "functions/cmd/"+strings.ToLower(strings.TrimSuffix(fn, "Function"))+"/main.go")
		if want.set != "" && !strings.Contains(main, "Secrets: "+want.set) || want.set == "" && strings.Contains(main, "Secrets:") {
			t.Errorf("%s's main does not read exactly the secrets %q", fn, want.set)
		}
		if got := strings.Join(secretGrants(t, raw, fn), ","); got != want.grant {
			t.Errorf("%s's role may read the secrets of %q, want %q", fn, got, want.grant)
		}
		if got := strings.Join(refsIn(functionEnv(raw, fn, "AMISS_SECRET_ARNS")), ","); got != want.env {
			t.Errorf("%s's AMISS_SECRET_ARNS names %q, want %q", fn, got, want.env)
		}
	}
	if v := functionEnv(raw, "OperatorFunction", "AMISS_SECRET_ARNS"); v == nil || v.Value != "none" {
		t.Error(`OperatorFunction's AMISS_SECRET_ARNS is not "none"`)
	}
	// SQS: the ingress and cleanup send (functions/queue), the runner changes visibility, the
	// cleanup receives and deletes dead letters (functions/cleanup).
	dead := readFile(t, "functions/cleanup/deadletters.go")
	if !strings.Contains(readFile(t, "functions/queue/sqs.go"), "SendMessage(") ||
		!strings.Contains(readFile(t, "functions/runner/sqs.go"), "ChangeMessageVisibility(") ||
		!strings.Contains(dead, "ReceiveMessage(") || !strings.Contains(dead, "DeleteMessage(") {
		t.Fatal("the SQS calls moved: update this test")
	}
	if got := strings.Join(sqsGrants(t, raw, "CleanupFunction", "DeadLetterQueue.Arn"), ","); got != "sqs:DeleteMessage,sqs:ReceiveMessage" {
		t.Errorf("the cleanup may call %s on the dead-letter queue, want receive and delete", got)
	}
	for _, fn := range []string{"IngressFunction", "RunnerFunction", "OperatorFunction"} {
		if got := sqsGrants(t, raw, fn, "DeadLetterQueue.Arn"); len(got) != 0 {
			t.Errorf("%s may call %v on the dead-letter queue", fn, got)
		}
	}
	// The runner's role is the template's own, so it also needs what the SQS event source
	// mapping does on its behalf.
	if got := strings.Join(sqsGrants(t, raw, "OperatorFunction", "DeliveryQueue.Arn"), ","); got != "sqs:SendMessage" {
		t.Errorf("the operator function may call %s on the delivery queue, want only to send (republish)", got)
	}
	for _, need := range [][2]string{{"IngressFunction", "sqs:SendMessage"}, {"CleanupFunction", "sqs:SendMessage"},
		{"RunnerFunction", "sqs:ChangeMessageVisibility"}, {"RunnerFunction", "sqs:ReceiveMessage"},
		{"RunnerFunction", "sqs:DeleteMessage"}, {"RunnerFunction", "sqs:GetQueueAttributes"}} {
		if !policy(need[0])[need[1]] {
			t.Errorf("%s lacks %s", need[0], need[1])
		}
	}
}

// The sample events decode into the handlers' inputs, with no field the types do not know;
// the runner's sample carries the key and binding the ingress's sample admits, under the
// packaged configuration and the local secret the stand-in Secrets Manager serves.
func TestSampleEvents(t *testing.T) {
	for file, into := range map[string]any{
		"events/ingress-webhook.json":  &events.APIGatewayV2HTTPRequest{},
		"events/runner-sqs.json":       &events.SQSEvent{},
		"events/cleanup-schedule.json": &map[string]any{},
		"events/operator-stats.json":   &operator.Request{},
	} {
		dec := json.NewDecoder(strings.NewReader(readFile(t, file)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	var ev events.SQSEvent
	json.Unmarshal([]byte(readFile(t, "events/runner-sqs.json")), &ev)
	msg, err := queue.Parse(ev.Records[0].Body)
	if err != nil {
		t.Fatalf("the sample SQS message is not a queue message: %v", err)
	}

	env := localEnv(t, "IngressFunction")
	cfg, err := config.ParseEnv([]byte(readFile(t, deployConfig(t))), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the packaged configuration with events/env.json: %v", err)
	}
	var req events.APIGatewayV2HTTPRequest
	json.Unmarshal([]byte(readFile(t, "events/ingress-webhook.json")), &req)
	route := cfg.Route(req.PathParameters["route"])
	if route == nil {
		t.Fatalf("the ingress sample's route %q is not in %s", req.PathParameters["route"], deployConfig(t))
	}
	var values map[string]string
	if err := json.Unmarshal([]byte(readFile(t, "events/secrets.json")), &values); err != nil {
		t.Fatal(err)
	}
	ref, _ := strings.CutPrefix(route.Secrets[0].From, "aws-secretsmanager:")
	secret, ok := values[ref]
	if !ok {
		t.Fatalf("events/secrets.json has no value for %s", ref)
	}
	h := http.Header{}
	for k, v := range req.Headers {
		h.Set(k, v)
	}
	v, _ := webhook.New(route.Scheme)
	proof, err := v.Verify(webhook.Request{Header: h, Body: []byte(req.Body)}, []webhook.Secret{{ID: "local", Value: secret}})
	if err != nil {
		t.Fatalf("the ingress sample is not signed with the local secret: %v", err)
	}
	b := ledger.Binding{Route: route.Name, Scheme: proof.Scheme, Identity: proof.Identity, BodyDigest: ledger.SumBody([]byte(req.Body))}
	if msg.Key != b.Key() || msg.Binding != b.Digest() {
		t.Fatalf("the runner sample names key %s binding %s; the ingress sample admits key %s binding %s", msg.Key, msg.Binding, b.Key(), b.Digest())
	}
}

// localEnv is what events/env.json gives a function ("Parameters", then its own section).
func localEnv(t *testing.T, fn string) map[string]string {
	var file map[string]map[string]string
	if err := json.Unmarshal([]byte(readFile(t, "events/env.json")), &file); err != nil {
		t.Fatalf("events/env.json: %v", err)
	}
	env := map[string]string{}
	for _, section := range []string{"Parameters", fn} {
		for k, v := range file[section] {
			env[k] = v
		}
	}
	return env
}

// Every variable events/env.json sets is one the template declares for the functions it
// names: SAM passes no other (defect: --env-vars could not supply what a local run needs).
func TestLocalEnvironmentIsDeclared(t *testing.T) {
	tpl, err := samtemplate.Read(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]map[string]string
	json.Unmarshal([]byte(readFile(t, "events/env.json")), &file)
	for section, vars := range file {
		fns := []string{section}
		if section == "Parameters" {
			fns = tpl.FunctionNames()
		} else if _, ok := tpl.Functions[section]; !ok {
			t.Errorf("events/env.json: %s is not a function of the template", section)
			continue
		}
		for _, fn := range fns {
			for name := range vars {
				if _, ok := tpl.Functions[fn].Env[name]; !ok {
					t.Errorf("events/env.json sets %s for %s, which the template does not declare: SAM would drop it", name, fn)
				}
			}
		}
	}
	for _, need := range []string{"AMISS_LEDGER", "AMISS_QUEUE_URL", "AMISS_SQS_ENDPOINT", "AMISS_SECRETS_ENDPOINT", "AMISS_S3_ENDPOINT"} {
		for _, fn := range tpl.FunctionNames() {
			if _, ok := tpl.Functions[fn].Env[need]; !ok {
				t.Errorf("%s does not declare %s, which a local run overrides", fn, need)
			}
		}
	}
}

// The template defects found by a first deploy, each held here.
func TestTemplateDeploysSafely(t *testing.T) {
	tpl, err := openTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	raw := rawTemplate(t)
	res := child(raw, "Resources")

	// EFS functions depend on the mount targets (SAM requires it); a DependsOn may not name
	// a conditional resource, so it goes through a handle that references both.
	handle := ""
	for name, f := range tpl.GetAllServerlessFunctionResources() {
		if len(f.AWSCloudFormationDependsOn) != 1 {
			t.Fatalf("%s depends on %v", name, f.AWSCloudFormationDependsOn)
		}
		handle = f.AWSCloudFormationDependsOn[0]
	}
	meta := child(child(res, handle), "Metadata")
	refs := map[string]bool{}
	for _, kv := range meta.Content {
		if kv.Tag == "!If" && len(kv.Content) == 3 && kv.Content[0].Value == "UseEFS" && kv.Content[1].Tag == "!Ref" {
			refs[kv.Content[1].Value] = true
		}
	}
	for name := range tpl.GetAllEFSMountTargetResources() {
		if !refs[name] {
			t.Errorf("the functions do not depend on the mount target %s (through %s)", name, handle)
		}
	}

	// The schedule gets a generated name, so two stacks in one account do not collide.
	ev := child(child(child(child(child(res, "CleanupFunction"), "Properties"), "Events"), "Every5Minutes"), "Properties")
	if v := child(ev, "OmitName"); v == nil || v.Value != "true" {
		t.Error("the ScheduleV2 event has a fixed name (set OmitName: true)")
	}

	// The lease ends inside the runner's timeout.
	maxLease := child(child(child(raw, "Parameters"), "LeaseSeconds"), "MaxValue")
	timeout := child(child(child(res, "RunnerFunction"), "Properties"), "Timeout")
	var lease, limit int
	fmt.Sscan(maxLease.Value, &lease)
	fmt.Sscan(timeout.Value, &limit)
	if lease == 0 || limit == 0 || lease >= limit {
		t.Errorf("LeaseSeconds may reach %d s against a runner timeout of %d s", lease, limit)
	}

	// Every function logs to a log group of the template's, with a retention, named after the
	// stack and not after the function: the group exists before the function (its LoggingConfig
	// refers to it), so no first log line can create it first under Lambda's own settings.
	for _, g := range tpl.GetAllLogsLogGroupResources() {
		if g.RetentionInDays == nil {
			t.Error("a log group without retention")
		}
	}
	for name := range tpl.GetAllServerlessFunctionResources() {
		lc := child(child(child(res, name), "Properties"), "LoggingConfig")
		group := child(lc, "LogGroup")
		if group == nil || group.Tag != "!Ref" {
			t.Errorf("%s names no log group of the template's (LoggingConfig.LogGroup: !Ref GROUP)", name)
			continue
		}
		g := child(res, group.Value)
		if v := child(g, "Type"); v == nil || v.Value != "AWS::Logs::LogGroup" || child(child(g, "Properties"), "RetentionInDays") == nil {
			t.Errorf("%s logs to %s, which is not a log group with a retention", name, group.Value)
			continue
		}
		if n := child(child(g, "Properties"), "LogGroupName"); n == nil || strings.Contains(n.Value, name) {
			t.Errorf("%s's log group is named after the function: it can race the function's first log line", name)
		}
		if v := child(lc, "LogFormat"); v == nil || v.Value != "JSON" {
			t.Errorf("%s's log format is not JSON", name)
		}
	}

	// The dead-letter alarm counts what the cleanup left in the dead-letter queue because no
	// row explains it (the cleanup removes or re-drives every other message).
	alarmed := false
	for _, kv := range pairsOf(res) {
		if v := child(kv[1], "Type"); v != nil && v.Value == "AWS::CloudWatch::Alarm" {
			p := child(kv[1], "Properties")
			if ns, m := child(p, "Namespace"), child(p, "MetricName"); ns != nil && m != nil && ns.Value == "amiss" && m.Value == "dead_letters_unexplained" {
				alarmed = true
			}
		}
	}
	if !alarmed || !strings.Contains(readFile(t, "functions/cleanup/cleanup.go"), `"dead_letters_unexplained"`) {
		t.Error("no alarm on the dead letters no row explains")
	}

	// The bucket refuses requests without TLS.
	tls := false
	for _, kv := range pairsOf(res) {
		if v := child(kv[1], "Type"); v != nil && v.Value == "AWS::S3::BucketPolicy" {
			for _, st := range child(child(child(kv[1], "Properties"), "PolicyDocument"), "Statement").Content {
				cond := child(child(child(st, "Condition"), "Bool"), "aws:SecureTransport")
				if child(st, "Effect").Value == "Deny" && cond != nil && cond.Value == "false" {
					tls = true
				}
			}
		}
	}
	if !tls {
		t.Error("no bucket policy denying requests without TLS")
	}

	// No role takes AWS's VPC execution policy, whose logs statement would let it write to any
	// log group: the EFS variant's roles have its EC2 calls written out (template_ops_test.go).
	for _, kv := range pairsOf(res) {
		if v := child(kv[1], "Type"); v == nil || v.Value != "AWS::IAM::Role" {
			continue
		}
		if strings.Contains(yamlString(t, child(child(kv[1], "Properties"), "ManagedPolicyArns")), "VPCAccess") {
			t.Errorf("%s takes AWS's VPC execution policy", kv[0].Value)
		}
	}
}

func pairsOf(n *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}
