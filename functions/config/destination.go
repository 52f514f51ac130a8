package config

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/amiss-ci/amiss/functions/provider"
)

// One subject per API. The verdicts of every route publishing to one API, repository, commit
// and status context are ordered together (docs/runner.md, what stands on the commit), so the
// API's name must not depend on how a route spells its base URL. A destination is the
// publisher and its base URL normalised: scheme and host in lower case, a host's trailing dot
// dropped, an IP address in its shortest form, a port as its number is written and left out
// when it is the scheme's default (443, 80), the path as written but for its trailing slashes
// (GitHub Enterprise Server's /api/v3 is part of the API's name). Two spellings that normalise
// alike name one API and share one order.
// Two that only the network could tell apart are refused at load, naming both routes: this
// machine's names for itself (localhost, 127.0.0.1, ::1) at one port and path.

// Destination names the API a route with publisher provider and base URL baseURL posts to.
func Destination(provider, baseURL string) string {
	return provider + " " + normalBase(baseURL)
}

// Destination names the API the route's publisher posts to (the package's Destination).
func (p *Publish) Destination() string { return Destination(p.Provider, p.BaseURL) }

// written is how amiss named the destination before names were normalised: the base URL as
// written, its trailing slashes dropped. Subject records kept from then are keyed by it.
func (p *Publish) written() string { return p.Provider + " " + strings.TrimRight(p.BaseURL, "/") }

// OldDestinations lists the names that subject records of destination dest may be kept under
// from before destinations were normalised: every route's base URL publishing to dest, as
// written, that does not normalise to itself. The runner consults them before it orders a
// verdict, so that a verdict recorded under an old name is not overtaken by an older one.
func (c *Config) OldDestinations(dest string) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range c.Routes {
		if r == nil || r.Publish.Destination() != dest {
			continue
		}
		if w := r.Publish.written(); w != dest && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}

// normalBase is base normalised; a base that does not parse as a URL with a host (none, for
// the log publisher) is kept as written, its trailing slashes dropped.
func normalBase(base string) string {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return strings.TrimRight(base, "/")
	}
	scheme := strings.ToLower(u.Scheme)
	host := hostOf(u)
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := portOf(u); port != defaultPorts[scheme] {
		host += ":" + port
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/")
}

var defaultPorts = map[string]string{"https": "443", "http": "80"}

// hostOf is u's host as one spelling: lower case, without a trailing dot, an IP address in
// its shortest form (::1, not 0:0:0:0:0:0:0:1).
func hostOf(u *url.URL) string {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return host
}

// portOf is the port u names, as a number is written (08080 is 8080), or its scheme's default.
func portOf(u *url.URL) string {
	port := u.Port()
	if n, err := strconv.Atoi(port); err == nil {
		return strconv.Itoa(n)
	}
	if port == "" {
		return defaultPorts[strings.ToLower(u.Scheme)]
	}
	return port
}

// thisMachine reports whether host (as hostOf spells it) names the machine the runner runs on.
func thisMachine(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
}

// checkDestinations refuses two routes whose publishers name one API in spellings that do not
// normalise alike: localhost, 127.0.0.1 and ::1 at one scheme, port and path.
func (c *Config) checkDestinations() error {
	type place struct{ provider, scheme, port, path string }
	first := map[place]*Route{}
	for _, name := range c.RouteNames() {
		r := c.Routes[name]
		if p, ok := provider.Publishing(r.Publish.Provider); !ok || !p.Remote {
			continue
		}
		u, err := url.Parse(r.Publish.BaseURL)
		if err != nil || !thisMachine(hostOf(u)) {
			continue
		}
		k := place{r.Publish.Provider, strings.ToLower(u.Scheme), portOf(u), strings.TrimRight(u.EscapedPath(), "/")}
		o, ok := first[k]
		if !ok {
			first[k] = r
			continue
		}
		if o.Publish.Destination() != r.Publish.Destination() {
			return fmt.Errorf("routes.%s.publish.base_url: %q and routes.%s's %q name one API (%s, %s and %s are this machine), "+
				"whose verdicts on one commit must be ordered together: write both base URLs alike",
				name, r.Publish.BaseURL, o.Name, o.Publish.BaseURL, "localhost", "127.0.0.1", "::1")
		}
	}
	return nil
}
