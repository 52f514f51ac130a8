// Package glob matches the slash-separated names the built-in rules check (a repository's
// changed paths, a pull request's target branch) against the rules' globs.
//
// A glob is segments separated by "/", matched against the name's segments one by one. A
// segment matches one segment of the name as path.Match matches a name: "*" any run of
// characters (a leading dot included), "?" one character, "[...]" a class ("[^...]" or, as git
// writes it, "[!...]" negated), "\" escapes the next character. A segment that is exactly
// "**" matches whole segments: any number of them, none included, at the start or in the
// middle ("**/*.pem" matches key.pem and a/b/key.pem, "a/**/b" matches a/b), and at least one
// at the end ("secrets/**" matches every file under secrets, not a file named secrets).
// Matching is byte for byte, case included, as git compares paths, and takes time
// proportional to the glob's segments times the name's.
//
// Compile refuses a glob that would silently match nothing a git path or branch name can be:
// a leading or trailing "/", an empty, "." or ".." segment, a "**" that is not a whole
// segment, braces (not glob syntax here), an empty range such as [z-a], and invalid syntax.
package glob

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// doubleStar is the segment that matches whole segments.
const doubleStar = "**"

// Glob is a compiled glob.
type Glob struct {
	text string
	segs []string
}

// Compile parses a glob, refusing one that cannot match what it says (see the package doc).
// The error says why and, where one is clear, what to write instead.
func Compile(text string) (*Glob, error) {
	switch {
	case text == "":
		return nil, errors.New("empty")
	case strings.HasPrefix(text, "/"):
		return nil, fmt.Errorf("starts with /, which no path or branch name does: they are relative to the repository (write %q)",
			strings.TrimLeft(text, "/"))
	case strings.HasSuffix(text, "/"):
		return nil, fmt.Errorf("ends with /, which no path or branch name does (a changed path is a file's): write %q for everything under it",
			text+doubleStar)
	}
	segs := strings.Split(text, "/")
	for i, s := range segs {
		segs[i] = negations(s)
		if err := checkSegment(segs[i], s); err != nil {
			return nil, err
		}
	}
	return &Glob{text: text, segs: segs}, nil
}

// negations writes a class negated as git and shells negate it, [!...], as path.Match
// negates it, [^...]. A "!" that opens a class is a member only escaped: [\!...].
func negations(s string) string {
	b := []byte(s)
	in := false // inside a class
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '\\':
			i++
		case !in && b[i] == '[':
			in = true
			if i+1 < len(b) && b[i+1] == '!' {
				b[i+1] = '^'
				i++
			}
		case in && b[i] == ']':
			in = false
		}
	}
	return string(b)
}

// MustCompile is Compile for a glob known to be valid; it panics on an invalid one.
func MustCompile(text string) *Glob {
	g, err := Compile(text)
	if err != nil {
		panic(fmt.Sprintf("glob %q: %v", text, err))
	}
	return g
}

// String returns the glob as it was written.
func (g *Glob) String() string { return g.text }

// checkSegment refuses a segment s, written as orig, that is invalid or cannot match a
// segment of a git path.
func checkSegment(s, orig string) error {
	switch s {
	case "":
		return errors.New("has an empty segment (//), which no path or branch name has")
	case ".", "..":
		return fmt.Errorf("has a %q segment, which no path or branch name has", orig)
	case doubleStar:
		return nil
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Errorf("segment %q is not a valid glob: an unclosed [, an empty [], a range missing its end, or a trailing \\", orig)
	}
	// The syntax is path.Match's: scan it for what it accepts and never matches as meant.
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*':
			if i+1 < len(s) && s[i+1] == '*' {
				return fmt.Errorf("segment %q: \"**\" must be a whole segment, as in \"**/*.pem\" or \"secrets/**\" (a single * matches within a segment)", orig)
			}
		case '{':
			return fmt.Errorf("segment %q: braces are not glob syntax here: write one glob per alternative (a literal { is \\{)", orig)
		case '[':
			end, err := checkClass(s, i+1)
			if err != nil {
				return fmt.Errorf("segment %q: %v", orig, err)
			}
			i = end
		}
	}
	return nil
}

// checkClass reads the class of s that starts at i (after its '['), which path.Match found
// well formed, and returns the index of its closing ']'. A range whose end is below its start
// is an error: path.Match takes it and matches nothing with it.
func checkClass(s string, i int) (int, error) {
	if i < len(s) && s[i] == '^' {
		i++
	}
	for n := 0; ; n++ {
		if s[i] == ']' && n > 0 {
			return i, nil
		}
		lo, next := classChar(s, i)
		i = next
		if s[i] == '-' {
			hi, next := classChar(s, i+1)
			if hi < lo {
				return 0, fmt.Errorf("the range %c-%c is empty (its end is below its start)", lo, hi)
			}
			i = next
		}
	}
}

// classChar reads one character of a class at i, escaped or not, and returns it with the index
// after it.
func classChar(s string, i int) (rune, int) {
	if s[i] == '\\' {
		i++
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, i + n
}

// Match reports whether the glob matches name (a path or branch name, "/"-separated).
func (g *Glob) Match(name string) bool {
	parts := strings.Split(name, "/")
	n := len(parts)
	// at[j]: the glob's segments so far match the name's first j segments.
	at := make([]bool, n+1)
	at[0] = true
	next := make([]bool, n+1)
	for i, s := range g.segs {
		if s == doubleStar {
			// Any number of segments, or at least one when it ends the glob.
			last := i == len(g.segs)-1
			seen := false
			for j := 0; j <= n; j++ {
				if !last {
					seen = seen || at[j]
				}
				next[j] = seen
				if last {
					seen = seen || at[j]
				}
			}
		} else {
			next[0] = false
			for j := 1; j <= n; j++ {
				next[j] = false
				if at[j-1] {
					next[j], _ = path.Match(s, parts[j-1])
				}
			}
		}
		at, next = next, at
	}
	return at[n]
}
