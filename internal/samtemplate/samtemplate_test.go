package samtemplate_test

import (
	"testing"

	"github.com/amiss-ci/amiss/internal/samtemplate"
)

const doc = `
Parameters:
  Repos: {Type: String, Default: "acme/*"}
  Arn: {Type: String}
Globals:
  Function:
    Timeout: 30
    Environment:
      Variables:
        PLAIN: value
        FROM_PARAM: !Ref Repos
        FROM_SUB: !Sub "x-${Arn}"
        EMPTY: ""
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 180
      Environment:
        Variables:
          PLAIN: own
          LEASE: 60s
  Other:
    Type: AWS::Serverless::Function
  Queue:
    Type: AWS::SQS::Queue
`

func TestParse(t *testing.T) {
	tpl, err := samtemplate.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.FunctionNames(); len(got) != 2 || got[0] != "Fn" || got[1] != "Other" {
		t.Fatalf("functions %v", got)
	}
	fn := tpl.Functions["Fn"]
	if fn.Timeout != 180 || tpl.Functions["Other"].Timeout != 30 {
		t.Fatalf("timeouts %d %d", fn.Timeout, tpl.Functions["Other"].Timeout)
	}
	want := map[string]samtemplate.Value{
		"PLAIN": {Literal: "own"}, "LEASE": {Literal: "60s"}, "EMPTY": {Literal: ""},
		"FROM_PARAM": {Intrinsic: true, Ref: "Repos"}, "FROM_SUB": {Intrinsic: true},
	}
	if len(fn.Env) != len(want) {
		t.Fatalf("env %v", fn.Env)
	}
	for k, v := range want {
		if fn.Env[k] != v {
			t.Errorf("%s = %+v, want %+v", k, fn.Env[k], v)
		}
	}
	if p := tpl.Parameters["Repos"]; !p.HasDefault || p.Default != "acme/*" {
		t.Errorf("Repos %+v", p)
	}
	if tpl.Parameters["Arn"].HasDefault {
		t.Error("Arn has no default")
	}
}
