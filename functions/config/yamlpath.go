package config

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// FieldError is a configuration error at one YAML path, such as routes.acme.secrets[0].from.
// Its message speaks of YAML (fields, lists, durations), never of the Go types behind them.
type FieldError struct {
	// Path is the YAML path of the field ("" for the whole document).
	Path string
	// Line is the line of the field in the file (0 when unknown).
	Line int
	Msg  string
}

func (e *FieldError) Error() string {
	s := e.Msg
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// envRef matches ${NAME}: an environment variable expanded at load time.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${NAME} in every scalar value (never in a key) with the environment
// variable NAME. A list item that is exactly ${NAME} becomes one item per comma-separated
// value of NAME. A variable that is unset or empty is an error naming the field.
func expand(n *yaml.Node, path string, getenv func(string) string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := expand(c, path, getenv); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := expand(n.Content[i+1], join(path, n.Content[i].Value), getenv); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		var items []*yaml.Node
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if m := envRef.FindStringSubmatch(c.Value); c.Kind == yaml.ScalarNode && m != nil && m[0] == c.Value {
				v, err := lookup(getenv, m[1], p, c.Line)
				if err != nil {
					return err
				}
				for _, part := range strings.Split(v, ",") {
					if part = strings.TrimSpace(part); part != "" {
						items = append(items, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: part, Line: c.Line, Column: c.Column})
					}
				}
				continue
			}
			if err := expand(c, p, getenv); err != nil {
				return err
			}
			items = append(items, c)
		}
		n.Content = items
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return nil
		}
		var err error
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			v, e := lookup(getenv, envRef.FindStringSubmatch(ref)[1], path, n.Line)
			if e != nil && err == nil {
				err = e
			}
			return v
		})
		n.Tag = "!!str"
		return err
	}
	return nil
}

func lookup(getenv func(string) string, name, path string, line int) (string, error) {
	v := getenv(name)
	if v == "" {
		return "", &FieldError{Path: path, Line: line, Msg: fmt.Sprintf("${%s}: the environment variable %s is not set (set it, or write the value in the file)", name, name)}
	}
	return v, nil
}

// EnvUse is an environment variable a configuration file reads: a ${NAME} anywhere, or an
// env:NAME secret reference.
type EnvUse struct {
	Name string
	// Path is the YAML path of the field that reads it.
	Path string
	Line int
	// Secret is set for an env:NAME secret reference (the variable holds a secret's value).
	Secret bool
}

// EnvUses lists the environment variables a configuration file reads, without reading them:
// what a packaging step checks against the environment a deployment declares.
func EnvUses(data []byte) ([]EnvUse, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var out []EnvUse
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], join(path, n.Content[i].Value))
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.ScalarNode:
			for _, m := range envRef.FindAllStringSubmatch(n.Value, -1) {
				out = append(out, EnvUse{Name: m[1], Path: path, Line: n.Line})
			}
			if name, ok := strings.CutPrefix(n.Value, "env:"); ok && strings.HasSuffix(path, ".from") && !strings.Contains(name, "${") {
				out = append(out, EnvUse{Name: name, Path: path, Line: n.Line, Secret: true})
			}
		}
	}
	walk(&doc, "")
	return out, nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkShape walks the YAML tree against the type it decodes into, and reports the first
// field that is unknown or of the wrong kind, by its YAML path.
func checkShape(n *yaml.Node, t reflect.Type, path string) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return checkShape(n.Content[0], t, path)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // the field keeps its default
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(msg string, a ...any) error {
		return &FieldError{Path: path, Line: n.Line, Msg: fmt.Sprintf(msg, a...)}
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return bad("want a duration such as 30s, 5m or 72h")
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return bad("%q is not a duration (want a number and a unit, such as 30s, 5m or 72h)", n.Value)
		}
		return nil
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return bad("want a mapping of fields (%s)", strings.Join(yamlFields(t), ", "))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i]
			f, ok := fieldByYAMLName(t, key.Value)
			if !ok {
				return &FieldError{Path: join(path, key.Value), Line: key.Line,
					Msg: fmt.Sprintf("unknown field (known here: %s)", strings.Join(yamlFields(t), ", "))}
			}
			if err := checkShape(n.Content[i+1], f.Type, join(path, key.Value)); err != nil {
				return err
			}
		}
		return nil
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return bad("want a mapping of names to entries")
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Kind != yaml.ScalarNode {
				return &FieldError{Path: path, Line: n.Content[i].Line, Msg: "want plain names as keys"}
			}
			if err := checkShape(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
		return nil
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return bad("want a list, such as [a, b] or one \"- item\" per line")
		}
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode && c.Tag == "!!null" {
				// The decoder drops it: a list of one would read as no list at all.
				return &FieldError{Path: p, Line: c.Line, Msg: "an empty item: write its value, or remove the item"}
			}
			if err := checkShape(c, t.Elem(), p); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return bad("want a single value, not a list or a mapping")
	}
	switch t.Kind() {
	case reflect.String:
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			if _, perr := strconv.ParseFloat(n.Value, 64); perr == nil {
				return bad("%q is out of range or not a whole number", n.Value)
			}
			return bad("%q is not a whole number", n.Value)
		}
		return nil
	case reflect.Bool:
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return bad("%q is neither true nor false", n.Value)
		}
		return nil
	}
	return nil
}

// yamlName is a struct field's YAML name ("" when the field is not read from YAML).
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag := f.Tag.Get("yaml")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func yamlFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
