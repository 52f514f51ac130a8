package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/amiss-ci/amiss/functions/config"
)

// One API, one name: spellings of a base URL that name the same API give the same destination;
// what only the path or the host tells apart stays apart.
func TestADestinationIsTheAPIWhateverItsSpelling(t *testing.T) {
	same := [][]string{
		{"https://api.github.com", "https://api.github.com/", "https://API.GitHub.com", "HTTPS://api.github.com:443",
			"https://api.github.com.", "https://api.github.com//"},
		{"https://ghe.example.com/api/v3", "https://GHE.example.com/api/v3/", "https://ghe.example.com:443/api/v3",
			"https://ghe.example.com:0443/api/v3"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "HTTP://127.0.0.1:8080", "http://127.0.0.1:08080"},
		{"http://gitea.example.com", "http://gitea.example.com:80/"},
		{"http://[::1]:9000", "http://[0:0:0:0:0:0:0:1]:9000/"},
	}
	for _, group := range same {
		want := config.Destination("github", group[0])
		for _, b := range group[1:] {
			if got := config.Destination("github", b); got != want {
				t.Errorf("%q is %q, want %q (as %q)", b, got, want, group[0])
			}
		}
	}
	apart := [][2]string{
		{"https://ghe.example.com/api/v3", "https://ghe.example.com"},
		{"https://api.github.com", "http://api.github.com"},
		{"https://gitlab.example.com:8443", "https://gitlab.example.com"},
		{"http://127.0.0.1:8080", "http://127.0.0.2:8080"},
	}
	for _, p := range apart {
		if config.Destination("github", p[0]) == config.Destination("github", p[1]) {
			t.Errorf("%q and %q are given one name", p[0], p[1])
		}
	}
	if config.Destination("github", "https://x.example") == config.Destination("gitea", "https://x.example") {
		t.Error("two publishers at one base URL are given one name")
	}
	// What amiss named its destinations before, when written plainly, is the name still: the
	// records kept under it go on ordering verdicts.
	for _, b := range []string{"https://api.github.com", "https://gitlab.com", "http://127.0.0.1:8080", "https://ghe.example.com/api/v3", ""} {
		if got, want := config.Destination("github", b), "github "+b; got != want {
			t.Errorf("%q: %q, want %q", b, got, want)
		}
	}
}

func twoRoutes(a, b string) string {
	route := func(name, baseURL string) string {
		return fmt.Sprintf(`
  %s:
    provider: github
    secrets: [{id: a, from: "env:X"}]
    repositories: ["acme/app"]
    publish: {provider: github, base_url: %q, token: {from: "env:T"}}
`, name, baseURL)
	}
	return "routes:" + route("opened", a) + route("edited", b)
}

// Two routes spelling one API alike but for what normalises share one destination; the
// spellings that do not normalise to it are named as old destinations, under which records may
// be kept from before.
func TestTwoSpellingsOfOneAPIShareOneDestination(t *testing.T) {
	c, err := config.Parse([]byte(twoRoutes("https://API.github.com:443/", "https://api.github.com")))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Route("opened").Publish.Destination(), c.Route("edited").Publish.Destination()
	if a != b || a != "github https://api.github.com" {
		t.Fatalf("destinations %q and %q, want both github https://api.github.com", a, b)
	}
	if got := c.OldDestinations(a); strings.Join(got, ",") != "github https://API.github.com:443" {
		t.Fatalf("old destinations %q, want the first route's spelling as written", got)
	}
	if got := c.OldDestinations("github https://other.example"); len(got) != 0 {
		t.Fatalf("old destinations of an API no route names: %q", got)
	}
}

// Two routes naming this machine by two of its names at one port are refused, naming both
// routes: nothing but the network tells whether they are one API.
func TestTwoNamesOfThisMachineAtOnePortAreRefusedNamingBothRoutes(t *testing.T) {
	for _, p := range [][2]string{{"http://127.0.0.1:8080", "http://localhost:8080"}, {"http://LOCALHOST:8080/", "http://[::1]:8080"},
		{"https://localhost/api/v3", "https://127.0.0.1:443/api/v3/"}, {"http://localhost.:8080", "http://127.0.0.1:8080"},
		{"http://localhost:08080", "http://[::1]:8080"}} {
		_, err := config.Parse([]byte(twoRoutes(p[0], p[1])))
		if err == nil || !strings.Contains(err.Error(), "routes.opened") || !strings.Contains(err.Error(), "routes.edited") ||
			!strings.Contains(err.Error(), p[0]) || !strings.Contains(err.Error(), p[1]) {
			t.Errorf("%q and %q: %v, want a refusal naming both routes and their base URLs", p[0], p[1], err)
		}
	}
	for _, p := range [][2]string{{"http://127.0.0.1:8080", "http://localhost:9090"}, {"http://127.0.0.1:8080/a", "http://localhost:8080/b"},
		{"http://localhost:8080", "http://localhost:8080/"}} {
		if _, err := config.Parse([]byte(twoRoutes(p[0], p[1]))); err != nil {
			t.Errorf("%q and %q refused: %v", p[0], p[1], err)
		}
	}
}
