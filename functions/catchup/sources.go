package catchup

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/github"
	"github.com/amiss-ci/amiss/functions/providerapi/gitlab"
)

// GitHub is a GitHub webhook as a Source: the App's (Client made by github.NewAppClient),
// an organization's or a repository's (Client with a token that administers its hooks).
type GitHub struct {
	// Route is the route the hook delivers to, for the cursor's name and operators.
	Route  string
	Hook   github.Hook
	Client *github.Client
}

// Name implements Source: catchup-<route>-github-<app|org-NAME-ID|repo-OWNER-NAME-ID>.
func (g *GitHub) Name() string {
	var h string
	switch {
	case g.Hook.App:
		h = "app"
	case g.Hook.Org != "":
		h = fmt.Sprintf("org-%s-%d", g.Hook.Org, g.Hook.ID)
	default:
		h = fmt.Sprintf("repo-%s-%d", strings.ReplaceAll(g.Hook.Repo, "/", "-"), g.Hook.ID)
	}
	return stateName("catchup-" + g.Route + "-github-" + h)
}

// Describe implements Source.
func (g *GitHub) Describe() string { return fmt.Sprintf("route %s: GitHub %v", g.Route, g.Hook) }

// Window implements Source: GitHub redelivers for 3 days.
func (g *GitHub) Window() time.Duration { return github.RedeliveryWindow }

// Attempts implements Source.
func (g *GitHub) Attempts(ctx context.Context, maxPages int, visit func([]Attempt) (bool, error)) error {
	pages := 0
	cut := false
	err := g.Client.Deliveries(ctx, g.Hook, maxPages+1, func(ds []github.Delivery) (bool, error) {
		if pages++; pages > maxPages {
			cut = true
			return false, nil
		}
		as := make([]Attempt, 0, len(ds))
		for _, d := range ds {
			repo := g.Hook.Repo
			if repo == "" && d.RepositoryID != 0 {
				repo = "repository id " + strconv.FormatInt(d.RepositoryID, 10)
			}
			ev := d.Event
			if d.Action != "" {
				ev += "." + d.Action
			}
			as = append(as, Attempt{ID: strconv.FormatInt(d.ID, 10), Delivery: d.GUID, At: d.DeliveredAt,
				StatusCode: d.StatusCode, Event: ev, Repository: repo})
		}
		return visit(as)
	})
	if err == nil && cut {
		return ErrListingCut
	}
	return err
}

// Redeliver implements Source.
func (g *GitHub) Redeliver(ctx context.Context, a Attempt) error {
	id, err := strconv.ParseInt(a.ID, 10, 64)
	if err != nil {
		return &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("delivery id %q is not GitHub's", a.ID)}
	}
	return g.Client.Redeliver(ctx, g.Hook, id)
}

// GitLab is a GitLab project or group webhook as a Source.
type GitLab struct {
	Route  string
	Hook   gitlab.Hook
	Client *gitlab.Client
}

// Name implements Source: catchup-<route>-gitlab-<project|group>-<ID>-<hook>.
func (g *GitLab) Name() string {
	kind := "project"
	if g.Hook.Group != "" {
		kind = "group"
	}
	return stateName(fmt.Sprintf("catchup-%s-gitlab-%s-%s-%d", g.Route, kind, g.Hook.Parent(), g.Hook.ID))
}

// Describe implements Source.
func (g *GitLab) Describe() string { return fmt.Sprintf("route %s: GitLab %v", g.Route, g.Hook) }

// Window implements Source: GitLab lists a hook's events of the last 7 days.
func (g *GitLab) Window() time.Duration { return gitlab.HookEventRetention }

// Attempts implements Source.
func (g *GitLab) Attempts(ctx context.Context, maxPages int, visit func([]Attempt) (bool, error)) error {
	pages := 0
	cut := false
	err := g.Client.HookEvents(ctx, g.Hook, maxPages+1, func(es []gitlab.HookEvent) (bool, error) {
		if pages++; pages > maxPages {
			cut = true
			return false, nil
		}
		as := make([]Attempt, 0, len(es))
		for _, e := range es {
			repo := e.RequestData.Project.Path // a group hook's events are its projects'
			if repo == "" {
				repo = g.Hook.Parent()
			}
			as = append(as, Attempt{ID: strconv.FormatInt(e.ID, 10), Delivery: e.Delivery(), At: e.CreatedAt,
				StatusCode: e.StatusCode(), Event: e.Trigger, Repository: repo})
		}
		return visit(as)
	})
	if err == nil && cut {
		return ErrListingCut
	}
	return err
}

// Redeliver implements Source.
func (g *GitLab) Redeliver(ctx context.Context, a Attempt) error {
	id, err := strconv.ParseInt(a.ID, 10, 64)
	if err != nil {
		return &providerapi.Error{Class: providerapi.Permanent, Err: fmt.Errorf("hook event id %q is not GitLab's", a.ID)}
	}
	return g.Client.ResendHookEvent(ctx, g.Hook, id)
}

// stateName makes s a state record's name: lower case, and every character outside a-z, 0-9,
// '-' and '_' replaced by '_', at most 100 characters (a longer one ends in a digest of the
// whole).
func stateName(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 100 {
		sum := fnv64(s)
		b = append(b[:83], fmt.Sprintf("-%016x", sum)...)
	}
	return string(b)
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
