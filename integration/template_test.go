package integration_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/goformation/v7"

	"github.com/amiss-ci/amiss/functions/queue"
	"go.yaml.in/yaml/v3"
)

// The template checks: every function's build target exists; the environment the code reads
// and the one the template sets are the same; each function's event matches its handler; and
// the IAM policies cover the S3 and SQS calls the code makes.

const root = ".."

// localOnly are variables the code reads that a deployment leaves unset on purpose.
var localOnly = map[string]string{
	"AMISS_S3_ENDPOINT": "an S3-compatible endpoint, for stores other than AWS S3",
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
	tpl, err := goformation.Open(filepath.Join(root, "template.yaml"))
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
		target := regexp.MustCompile(`(?m)^build-` + name + `:\n\t\$\(LAMBDA_BUILD\) -o \$\(ARTIFACTS_DIR\)/bootstrap \./functions/cmd/` + w.cmd + `\n`)
		if !target.MatchString(makefile) {
			t.Fatalf("Makefile has no build-%s target building ./functions/cmd/%s", name, w.cmd)
		}
		main := readFile(t, "functions/cmd/"+w.cmd+"/main.go")
		if !strings.Contains(main, "package main") || !strings.Contains(main, "lambda.Start") {
			t.Fatalf("functions/cmd/%s is not a Lambda main", w.cmd)
		}
		// The event matches the handler.
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
var s3Calls = map[string]string{"GetObject": "s3:GetObject", "PutObject": "s3:PutObject", "DeleteObject": "s3:DeleteObject",
	"ListObjectsV2": "s3:ListBucket", "NewListObjectsV2Paginator": "s3:ListBucket"}

func TestPoliciesCoverTheCallsTheCodeMakes(t *testing.T) {
	raw := rawTemplate(t)
	policy := func(fn string) map[string]bool {
		out := map[string]bool{}
		actions(child(child(child(child(raw, "Resources"), fn), "Properties"), "Policies"), out)
		return out
	}
	// S3: every call of objstore's store; the ledger is used by all three functions, and
	// deletion only by cleanup (store.deleteOnce is called from objstore/cleanup.go only).
	store := readFile(t, "objstore/store.go")
	called := map[string]bool{}
	for call, action := range s3Calls {
		if regexp.MustCompile(`\b` + call + `\(`).MatchString(store) {
			called[action] = true
		}
	}
	// GetObject of a missing key answers 403 without ListBucket: every function needs it.
	called["s3:ListBucket"] = true
	for _, f := range []string{"objstore/ops.go", "objstore/ledger.go"} {
		if strings.Contains(readFile(t, f), "deleteOnce(") {
			t.Fatalf("%s deletes: the policies assume only cleanup does", f)
		}
	}
	for _, fn := range []string{"IngressFunction", "RunnerFunction", "CleanupFunction"} {
		p := policy(fn)
		for action := range called {
			if action == "s3:DeleteObject" && fn != "CleanupFunction" {
				if p[action] {
					t.Errorf("%s may delete ledger objects; only cleanup needs to", fn)
				}
				continue
			}
			if !p[action] {
				t.Errorf("%s lacks %s, which the ledger calls", fn, action)
			}
		}
		if !p["secretsmanager:GetSecretValue"] {
			t.Errorf("%s cannot read its secrets", fn)
		}
	}
	// SQS: the ingress and cleanup send (functions/queue), the runner changes visibility.
	if !strings.Contains(readFile(t, "functions/queue/sqs.go"), "SendMessage(") ||
		!strings.Contains(readFile(t, "functions/runner/sqs.go"), "ChangeMessageVisibility(") {
		t.Fatal("the SQS calls moved: update this test")
	}
	for fn, action := range map[string]string{"IngressFunction": "sqs:SendMessage", "CleanupFunction": "sqs:SendMessage",
		"RunnerFunction": "sqs:ChangeMessageVisibility"} {
		if !policy(fn)[action] {
			t.Errorf("%s lacks %s", fn, action)
		}
	}
}

// The sample events decode into the handlers' inputs, with no field the types do not know.
func TestSampleEvents(t *testing.T) {
	for file, into := range map[string]any{
		"events/ingress-webhook.json":  &events.APIGatewayV2HTTPRequest{},
		"events/runner-sqs.json":       &events.SQSEvent{},
		"events/cleanup-schedule.json": &map[string]any{},
	} {
		dec := json.NewDecoder(strings.NewReader(readFile(t, file)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	var ev events.SQSEvent
	json.Unmarshal([]byte(readFile(t, "events/runner-sqs.json")), &ev)
	if _, err := queue.Parse(ev.Records[0].Body); err != nil {
		t.Fatalf("the sample SQS message is not a queue message: %v", err)
	}
}
