package publish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/amiss-ci/amiss/functions/providerapi"
	"github.com/amiss-ci/amiss/functions/providerapi/bitbucket"
)

// Bitbucket posts build statuses to Bitbucket Cloud, POST
// {base}/2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build (base
// https://api.bitbucket.org), through Bitbucket Cloud's client. Its states are SUCCESSFUL and
// FAILED; a status needs a URL, so the commit's page is used when no target URL is configured.
// The status key is the context cut to BitbucketKeyLength characters (the configuration
// refuses two contexts that would share a key). Bitbucket Cloud's pull request events carry
// abbreviated commit hashes: the publisher resolves one to the full hash (GET
// .../commit/{hash}?fields=hash) and posts against that.
type Bitbucket struct {
	*bitbucket.Client
}

// NewBitbucket returns a Bitbucket Cloud publisher.
func NewBitbucket(baseURL, token string, hc *http.Client) *Bitbucket {
	return &Bitbucket{bitbucket.NewClient(baseURL, token, hc)}
}

// BitbucketKeyLength is the longest status key Bitbucket accepts, in characters.
const BitbucketKeyLength = 40

// BitbucketKey is the status key a context is published under: its first 40 characters.
func BitbucketKey(context string) string {
	if utf8.RuneCountInString(context) <= BitbucketKeyLength {
		return context
	}
	return string([]rune(context)[:BitbucketKeyLength])
}

// fullHashLength is the length of a full SHA-1 commit hash in hex.
const fullHashLength = 40

// resolve returns the full hash of an abbreviated one.
func (b *Bitbucket) resolve(ctx context.Context, repo, sha string) (string, error) {
	// Only the hash is asked for: the whole resource repeats the commit's message (raw and
	// rendered), which for a long message is more than an answer is read.
	a, err := b.Do(ctx, providerapi.Request{Method: http.MethodGet, URL: fmt.Sprintf("%s/commit/%s?fields=hash", repo, url.PathEscape(sha))})
	if err != nil {
		return "", err
	}
	var c struct {
		Hash string `json:"hash"`
	}
	if err := a.Decode("the commit "+sha, &c); err != nil || len(c.Hash) != fullHashLength || !strings.HasPrefix(c.Hash, sha) {
		return "", &Error{Class: Transient, Err: errors.New("bitbucket answered the commit " + sha + " without its full hash")}
	}
	return c.Hash, nil
}

// commit returns the repository's path and the full commit hash s is posted to (an
// abbreviated hash is resolved).
func (b *Bitbucket) commit(ctx context.Context, s Status) (repo, sha string, err error) {
	if repo, err = bitbucket.RepoPath(s.Repository); err != nil {
		return "", "", err
	}
	sha = strings.ToLower(s.SHA)
	if len(sha) < fullHashLength {
		if sha, err = b.resolve(ctx, repo, sha); err != nil {
			return "", "", err
		}
	}
	return repo, sha, nil
}

// Resolve implements Resolver: an abbreviated hash is resolved to the full one.
func (b *Bitbucket) Resolve(ctx context.Context, s Status) (Status, error) {
	_, sha, err := b.commit(ctx, s)
	s.SHA = sha
	return s, err
}

// body is the build status Publish posts for s on the commit sha.
func (b *Bitbucket) body(sha string, s Status) map[string]string {
	target := s.TargetURL
	if target == "" {
		target = fmt.Sprintf("https://bitbucket.org/%s/commits/%s", s.Repository, sha)
	}
	return buildStatus(s, BitbucketKey(s.Context), target)
}

// Publish implements Publisher.
func (b *Bitbucket) Publish(ctx context.Context, s Status) error {
	repo, sha, err := b.commit(ctx, s)
	if err != nil {
		return err
	}
	_, err = b.Do(ctx, providerapi.Request{Method: http.MethodPost, URL: fmt.Sprintf("%s/commit/%s/statuses/build", repo, url.PathEscape(sha)),
		Body: b.body(sha, s)})
	return err
}

// Standing implements Publisher: GET
// {base}/2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build/{key}. Bitbucket
// keeps one status per key, so it is the latest.
func (b *Bitbucket) Standing(ctx context.Context, s Status) (Standing, error) {
	repo, sha, err := b.commit(ctx, s)
	if err != nil {
		return 0, err
	}
	path := fmt.Sprintf("%s/commit/%s/statuses/build/%s", repo, url.PathEscape(sha), url.PathEscape(BitbucketKey(s.Context)))
	return buildStanding(ctx, b.Do, path, b.body(sha, s))
}
