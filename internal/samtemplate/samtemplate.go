// Package samtemplate reads what a local run and a packaging check need from a SAM template:
// each function's environment variables (Globals merged with the function's own), its
// timeout, and the template's parameters. It reads the YAML as written, CloudFormation's
// short tags (!Ref, !Sub, !If, ...) included, without resolving them.
package samtemplate

import (
	"fmt"
	"os"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Value is an environment variable's value as the template writes it.
type Value struct {
	// Literal is the value when it is a plain string (Intrinsic false).
	Literal string
	// Intrinsic is set when the value is computed by CloudFormation (!Ref, !Sub, !If...).
	Intrinsic bool
	// Ref names the parameter or resource of a plain !Ref.
	Ref string
}

// Function is one AWS::Serverless::Function.
type Function struct {
	// Env holds every variable the function gets: Globals' and its own (its own win).
	Env map[string]Value
	// Timeout is the function's timeout in seconds (its own, or Globals'; 3 when neither).
	Timeout int
}

// Parameter is one template parameter.
type Parameter struct {
	Default    string
	HasDefault bool
}

// Template is what this package reads from a template.
type Template struct {
	Functions  map[string]Function
	Parameters map[string]Parameter
}

// Read reads a template file.
func Read(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads a template.
func Parse(data []byte) (*Template, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("empty template")
	}
	root := doc.Content[0]
	t := &Template{Functions: map[string]Function{}, Parameters: map[string]Parameter{}}
	for _, kv := range pairs(child(root, "Parameters")) {
		p := Parameter{}
		if d := child(kv.v, "Default"); d != nil {
			p.Default, p.HasDefault = d.Value, true
		}
		t.Parameters[kv.k] = p
	}
	globals := child(child(root, "Globals"), "Function")
	globalEnv := envOf(globals)
	globalTimeout := 3
	if n := child(globals, "Timeout"); n != nil {
		if v, err := strconv.Atoi(n.Value); err == nil {
			globalTimeout = v
		}
	}
	for _, kv := range pairs(child(root, "Resources")) {
		if ty := child(kv.v, "Type"); ty == nil || ty.Value != "AWS::Serverless::Function" {
			continue
		}
		props := child(kv.v, "Properties")
		f := Function{Env: map[string]Value{}, Timeout: globalTimeout}
		for k, v := range globalEnv {
			f.Env[k] = v
		}
		for k, v := range envOf(props) {
			f.Env[k] = v
		}
		if n := child(props, "Timeout"); n != nil {
			if v, err := strconv.Atoi(n.Value); err == nil {
				f.Timeout = v
			}
		}
		t.Functions[kv.k] = f
	}
	return t, nil
}

// FunctionNames lists the functions in name order.
func (t *Template) FunctionNames() []string {
	var out []string
	for n := range t.Functions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func envOf(props *yaml.Node) map[string]Value {
	out := map[string]Value{}
	for _, kv := range pairs(child(child(props, "Environment"), "Variables")) {
		v := Value{Literal: kv.v.Value}
		if kv.v.Kind != yaml.ScalarNode || (kv.v.Tag != "!!str" && kv.v.Tag != "!!int" && kv.v.Tag != "!!bool" && kv.v.Tag != "!!float") {
			v = Value{Intrinsic: true}
			if kv.v.Tag == "!Ref" {
				v.Ref = kv.v.Value
			}
		}
		out[kv.k] = v
	}
	return out
}

type pair struct {
	k string
	v *yaml.Node
}

func pairs(n *yaml.Node) []pair {
	var out []pair
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, pair{n.Content[i].Value, n.Content[i+1]})
	}
	return out
}

func child(n *yaml.Node, key string) *yaml.Node {
	for _, kv := range pairs(n) {
		if kv.k == key {
			return kv.v
		}
	}
	return nil
}
