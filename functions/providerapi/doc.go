// Package providerapi is what every client of a provider's REST API shares: sending a request
// with a few quick retries, reading a bounded answer, classifying a failure, reading a wait the
// provider named, and following a listing's pages (Pages, given the provider's rule of where the
// next page is).
//
// One package per provider API sits on it (github, gitea, gitlab, bitbucket for Bitbucket
// Cloud, bitbucketdc for Bitbucket Data Center): each owns that API's authentication, its table
// of answers (which refusals are rate limits, which statuses mean busy) and its paging as the
// provider documents it. The publishers (functions/publish) and the readers of what a webhook
// leaves out are built on those clients, so a failure means the same to both:
//
//   - Transient: the provider or the network failed, or a rate limit; a later attempt may
//     succeed, after RetryAfter when the provider named a wait.
//   - Operator: a credential, a permission, a repository name or a base URL an operator must
//     fix (401, 403, 404, a redirect); retried on the long schedule, and said loudly.
//   - Permanent: a refusal that can never succeed for this request (400, 422, ...);
//     errors.Is(err, ErrPermanent) holds.
//
// Unknown says whether a failed request may have been applied all the same (a write whose
// answer was cut, timed out, or came from a gateway): such a write is never sent again blindly.
// A read never is Unknown: it applies nothing.
//
// The readers of what a webhook leaves out follow one procedure (ReadInputs): the provider's
// requests fill a copy of the change; a failure that asking again may mend is retried, and any
// other leaves the inputs unread, naming the provider's words for its own refusal (what to
// grant), or else the bound an answer went past or what failed. A push's range is read alike by
// every provider (ReadRange): from the commit the webhook names as its base, or, for a new
// branch, from the repository's default branch, with the provider's own comparison.
//
// The shared core holds no provider's rule: a new provider is a package of its own over it,
// and a rule one provider documents (GitHub's 403 rate limit, GitLab's busy 409) stays in that
// provider's package, where its documentation is cited.
package providerapi
