package glob_test

import (
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/evaluate/glob"
)

func TestMatch(t *testing.T) {
	deep := strings.Repeat("a/", 2000) + "x"
	for _, c := range []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"secrets/**", []string{"secrets/a", "secrets/a/b/c"}, []string{"secrets", "src/secrets/a", "secretsx/a", "Secrets/a"}},
		{"**/*.pem", []string{"key.pem", "a/key.pem", "a/b/c/key.pem", "a/.pem"}, []string{"key.pem.txt", "pem", "a/key.pemx"}},
		{"**/secrets/**", []string{"secrets/a", "x/secrets/a", "x/y/secrets/a/b"}, []string{"secrets", "x/secrets", "x/mysecrets/a"}},
		{"a/**/b", []string{"a/b", "a/x/b", "a/x/y/b"}, []string{"a", "b", "a/b/c", "x/a/b"}},
		{"**", []string{"a", "a/b"}, nil},
		{"*/secrets/**", []string{"deploy/secrets/k"}, []string{"secrets/k", "a/b/secrets/k"}},
		{"[Ss]ecrets/**", []string{"secrets/k", "Secrets/k"}, []string{"SECRETS/k"}},
		{"*.env", []string{".env", "prod.env"}, []string{"a/prod.env"}},
		{`\*.txt`, []string{"*.txt"}, []string{"a.txt"}},
		{"[^a]*", []string{"b"}, []string{"a", "abc"}},
		{"[!a]*", []string{"b", "!"}, []string{"a", "abc"}},
		{`[\!a]*`, []string{"!x", "ax"}, []string{"b"}},
		{"[[!]", []string{"[", "!"}, []string{"a"}},
		{"release/*", []string{"release/1.2"}, []string{"release", "release/1/2", "main"}},
		{"main", []string{"main"}, []string{"Main", "main/x", "x/main"}},
		// Bytes that are not UTF-8 (a Latin-1 file name): * takes them, ? takes one.
		{"secrets/**", []string{"secrets/\xff\xfe"}, nil},
		{"**/*.pem", []string{"caf\xe9/k.pem", "\xffk.pem"}, nil},
		{"caf?", []string{"caf\xe9", "café"}, []string{"caf\xe9\xe9"}},
		// Time proportional to segments: a name of 2,001 segments under three double stars.
		{"**/a/**/a/**/a/**/b", []string{deep[:len(deep)-1] + "b"}, []string{deep}},
	} {
		g, err := glob.Compile(c.glob)
		if err != nil {
			t.Fatalf("%q: %v", c.glob, err)
		}
		for _, name := range c.yes {
			if !g.Match(name) {
				t.Errorf("%q does not match %.40q", c.glob, name)
			}
		}
		for _, name := range c.no {
			if g.Match(name) {
				t.Errorf("%q matches %.40q", c.glob, name)
			}
		}
	}
}

// A glob that would silently match nothing a git path or branch name can be is refused,
// saying why and, where it is clear, what to write.
func TestAGlobThatCannotMatchWhatItSaysIsRefused(t *testing.T) {
	for pattern, says := range map[string]string{
		"":             "empty",
		"secrets/":     `write "secrets/**"`,
		"/secrets/**":  `write "secrets/**"`,
		"./secrets/**": `"." segment`,
		"a/../b":       `".." segment`,
		"secrets//key": "empty segment",
		"**.pem":       `"**" must be a whole segment`,
		"secrets/**x":  `"**" must be a whole segment`,
		"*.{pem,key}":  "braces",
		"[z-a]*":       "range z-a is empty",
		"[":            "not a valid glob",
		"a/[b-]":       "not a valid glob",
		`trailing\`:    "not a valid glob",
	} {
		_, err := glob.Compile(pattern)
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error saying %q", pattern, err, says)
		}
	}
	// What these look like but is not: escaped stars and braces, and the characters in a class.
	for _, ok := range []string{`\*\*.pem`, `a\**`, `\{a,b}`, "[{]x", "[*]*", "[a-z]", `[\]]`} {
		if _, err := glob.Compile(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
