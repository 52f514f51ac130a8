package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/amiss-ci/amiss/ledger"
)

// store is the handful of S3 calls the ledger makes, with the ambiguity of each resolved. Every
// answer's Date is handed to the store clock.

// store is the handful of S3 calls the ledger makes, with the ambiguity of each resolved. Every
// answer's Date is handed to the store clock.
type store struct {
	client *s3.Client
	bucket string
	prefix string
	clock  *storeClock
}

var (
	errNotFound = errors.New("object not found")
	// errRaced: a conditional write lost to another writer (412, 409 for a concurrent
	// conditional write, or 404 for If-Match on an object that is gone), and the object does
	// not hold our token.
	errRaced = errors.New("conditional write lost")
)

type object struct {
	body     []byte
	etag     string
	version  string
	modified time.Time // when this version was written, by the store's clock
}

func (s *store) key(name string) string { return s.prefix + name }

// dated adds a middleware to one call that reads the Date of its answers (every attempt's,
// errors included) into the store clock.
func (s *store) dated(o *s3.Options) {
	if s.clock == nil {
		return
	}
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("amissStoreDate",
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleDeserialize(ctx, in)
				if resp, ok := out.RawResponse.(*smithyhttp.Response); ok {
					if t, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
						s.clock.observe(t)
					}
				}
				return out, md, err
			}), middleware.After)
	})
}

func (s *store) get(ctx context.Context, name string) (object, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))}, s.dated)
	if err != nil {
		if isNotFound(err) {
			return object{}, errNotFound
		}
		return object{}, fmt.Errorf("%w: get %s: %v", ledger.ErrUnavailable, s.key(name), err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(io.LimitReader(out.Body, maxObjectBytes+1))
	if err != nil {
		return object{}, fmt.Errorf("%w: read %s: %v", ledger.ErrUnavailable, s.key(name), err)
	}
	if len(body) > maxObjectBytes {
		return object{}, fmt.Errorf("%w: %s is over %d bytes", ledger.ErrCorrupt, s.key(name), maxObjectBytes)
	}
	return object{body: body, etag: aws.ToString(out.ETag), version: versionID(out.VersionId), modified: aws.ToTime(out.LastModified)}, nil
}

// versionID is the id of the version an answer names. A version written while the bucket's
// versioning was suspended is the "null" version: MinIO answers it without a version id (only
// a listing of versions names it), AWS with "null"; deleting by version id "null" deletes it.
// The ledger opens only on a bucket that keeps versions, so an answer without an id names it.
func versionID(id *string) string {
	if v := aws.ToString(id); v != "" {
		return v
	}
	return "null"
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	return errors.As(err, &nsk) || httpStatus(err) == http.StatusNotFound
}

// putAttempts bounds the attempts of one conditional write.
const putAttempts = 4

// noRetries makes one call a single attempt: put resolves what each attempt did before it sends
// another.
func noRetries(o *s3.Options) { o.RetryMaxAttempts = 1 }

// put writes body (which carries token) with a condition: ifNoneMatch for a creation, or
// ifMatch with the ETag that was read. It answers the new ETag, errRaced when the write
// certainly lost, or ErrUnavailable when its outcome cannot be known.
//
// It makes its own attempts, not the SDK's, because the answer to a retry cannot be read
// alone: a 412 to the first attempt means the write lost; a 412 to a later one may answer an
// earlier attempt that landed after all. So after any failure it reads the object back: its
// token there means the write landed; the object unchanged means nothing landed and the write
// is tried again; anything else after an attempt that may have reached the store is an
// outcome it cannot know.
func (s *store) put(ctx context.Context, name string, body []byte, token, ifMatch string, create bool) (string, error) {
	etag, _, err := s.putBack(ctx, name, body, token, ifMatch, create)
	return etag, err
}

// putBack is put; when the write lost (errRaced) it also answers what it read back: the object
// as the store holds it (no ETag when there is none), on which the caller may decide again
// without reading it once more.
func (s *store) putBack(ctx context.Context, name string, body []byte, token, ifMatch string, create bool) (string, object, error) {
	sent := false // an earlier attempt may have reached the store (and may still land)
	for attempt := 1; ; attempt++ {
		in := &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name)), Body: bytes.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json")}
		switch {
		case create:
			in.IfNoneMatch = aws.String("*")
		case ifMatch != "":
			in.IfMatch = aws.String(ifMatch)
		}
		out, err := s.client.PutObject(ctx, in, s.dated, noRetries)
		if err == nil {
			return aws.ToString(out.ETag), object{}, nil
		}
		conditional := isPrecondition(err) || (ifMatch != "" && isNotFound(err))
		if !conditional && httpStatus(err) != http.StatusServiceUnavailable {
			sent = true // only a 503 is known to have applied nothing
		}
		// Read back, after a 412 too: a copy of this very request, delivered twice by the
		// network, may be what the store holds.
		back, gerr := s.get(ctx, name)
		switch {
		case gerr == nil && token != "" && tokenOf(back.body) == token:
			return back.etag, object{}, nil
		case gerr != nil && !errors.Is(gerr, errNotFound):
			return "", object{}, fmt.Errorf("%w: put %s: %v", ledger.ErrUnavailable, s.key(name), errors.Join(err, gerr))
		case conditional && !sent:
			// Lost: the first attempt was refused and the store holds another write. (Had a
			// copy of it landed and been overwritten since, the write is answered as lost
			// although it applied: callers whose writes name their own reservation or entry
			// recognise them when they read again.)
			return "", back, errRaced
		}
		unchanged := (create && errors.Is(gerr, errNotFound)) || (!create && gerr == nil && back.etag == ifMatch)
		if conditional || !unchanged || attempt == putAttempts || ctx.Err() != nil {
			return "", object{}, fmt.Errorf("%w: put %s: the outcome is unknown: %v", ledger.ErrUnavailable, s.key(name), err)
		}
		// Nothing landed: try again (an attempt still in flight can only land over the same
		// object, which this one then finds changed, or carries the same token).
		select {
		case <-time.After(time.Duration(25<<attempt)*time.Millisecond + time.Duration(rand.IntN(25))*time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// putPlain writes an object unconditionally (index entries, which carry no state).
func (s *store) putPlain(ctx context.Context, name string, body []byte) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name)),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}, s.dated)
	if err != nil {
		return fmt.Errorf("%w: put %s: %v", ledger.ErrUnavailable, s.key(name), err)
	}
	return nil
}

// objectVersion is one version (or delete marker) of an object, as listed.
type objectVersion struct {
	id     string
	latest bool
	marker bool
}

// versions lists every version and delete marker of one object, newest first.
func (s *store) versions(ctx context.Context, name string) ([]objectVersion, error) {
	key := s.key(name)
	var out []objectVersion
	p := s3.NewListObjectVersionsPaginator(s.client, &s3.ListObjectVersionsInput{Bucket: &s.bucket, Prefix: aws.String(key)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx, s.dated)
		if err != nil {
			return nil, fmt.Errorf("%w: list versions of %s: %v", ledger.ErrUnavailable, key, err)
		}
		for _, v := range page.Versions {
			if aws.ToString(v.Key) == key {
				out = append(out, objectVersion{id: aws.ToString(v.VersionId), latest: aws.ToBool(v.IsLatest)})
			}
		}
		for _, m := range page.DeleteMarkers {
			if aws.ToString(m.Key) == key {
				out = append(out, objectVersion{id: aws.ToString(m.VersionId), latest: aws.ToBool(m.IsLatest), marker: true})
			}
		}
	}
	// Only the latest matters for order: every other one is older than it.
	sort.SliceStable(out, func(i, j int) bool { return out[i].latest && !out[j].latest })
	return out, nil
}

// deleteVersion deletes one version of an object by its id. It never deletes by key alone: a
// version that landed after the caller judged the object survives, however late this request
// lands. Deleting a version that is already gone succeeds.
func (s *store) deleteVersion(ctx context.Context, name, version string) error {
	if version == "" {
		return fmt.Errorf("%w: delete %s: no version id (is the bucket versioned?)", ledger.ErrInvalid, s.key(name))
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name)),
		VersionId: aws.String(version)}, s.dated)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("%w: delete %s version %s: %v", ledger.ErrUnavailable, s.key(name), version, err)
	}
	return nil
}

// versionRef names one version of one object.
type versionRef struct {
	name, version string
}

// deleteVersions deletes the versions named, each by its version id (never by key alone), up to
// 1,000 in one request; a version already gone counts as deleted. The deletes of one call are
// not ordered among themselves: a caller that needs one version gone before another deletes
// them in two calls. A request that fails is an error; a version the store refuses to delete
// (a per-key error inside a 200 answer: a legal hold, a policy) is answered in refused, by the
// object's name, and the others are deleted: one object the store will not delete stops no
// other.
func (s *store) deleteVersions(ctx context.Context, refs []versionRef) (refused map[string]error, err error) {
	for len(refs) > 0 {
		n := min(len(refs), 1000)
		objs := make([]types.ObjectIdentifier, n)
		names := make(map[string]string, n)
		for i, r := range refs[:n] {
			if r.version == "" {
				return refused, fmt.Errorf("%w: delete %s: no version id (is the bucket versioned?)", ledger.ErrInvalid, s.key(r.name))
			}
			objs[i] = types.ObjectIdentifier{Key: aws.String(s.key(r.name)), VersionId: aws.String(r.version)}
			names[s.key(r.name)] = r.name
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket,
			Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}}, s.dated)
		if err != nil {
			return refused, fmt.Errorf("%w: delete %d versions under %s: %v", ledger.ErrUnavailable, n, s.prefix, err)
		}
		for _, e := range out.Errors {
			switch aws.ToString(e.Code) {
			case "NoSuchKey", "NoSuchVersion":
				continue
			}
			name, ok := names[aws.ToString(e.Key)]
			if !ok {
				return refused, fmt.Errorf("%w: delete under %s: an error for %s, which was not asked for: %s %s", ledger.ErrUnavailable,
					s.prefix, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
			}
			if refused == nil {
				refused = map[string]error{}
			}
			refused[name] = fmt.Errorf("%w: delete %s version %s: %s %s", ledger.ErrUnavailable, aws.ToString(e.Key), aws.ToString(e.VersionId),
				aws.ToString(e.Code), aws.ToString(e.Message))
		}
		refs = refs[n:]
	}
	return refused, nil
}

// without answers refs but those of the objects in refused.
func without(refs []versionRef, refused map[string]error) []versionRef {
	if len(refused) == 0 {
		return refs
	}
	out := refs[:0:0]
	for _, r := range refs {
		if refused[r.name] == nil {
			out = append(out, r)
		}
	}
	return out
}

// removeVersion makes judged, the version of name that the caller read and judged, disappear
// with the whole history below it: when judged is still the latest version, every older
// version and delete marker is deleted first (so that none becomes current again), then judged
// itself. When a newer version landed since the judgement, judged is left alone and that
// version stays current. It reports whether judged was the latest version when listed; gone
// reports that judged was not found at all (deleted before).
func (s *store) removeVersion(ctx context.Context, name, judged string) (latest, gone bool, err error) {
	vs, err := s.versions(ctx, name)
	if err != nil {
		return false, false, err
	}
	found := false
	for _, v := range vs {
		if v.id == judged {
			found, latest = true, v.latest
		}
	}
	if !found {
		return false, true, nil
	}
	if !latest {
		return false, false, nil
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].id != judged {
			if err := s.deleteVersion(ctx, name, vs[i].id); err != nil {
				return true, false, err
			}
		}
	}
	return true, false, s.deleteVersion(ctx, name, judged)
}

// indexEntry is one name in the end-time index with the ids of its versions, newest first.
type indexEntry struct {
	name     string
	versions []string
}

// listIndex lists up to max names under prefix whose latest version is an object (not a
// delete marker), in name order, with every version id of each. Every page is one request;
// any failure is an error.
func (s *store) listIndex(ctx context.Context, prefix string, max int) ([]indexEntry, error) {
	in := &s3.ListObjectVersionsInput{Bucket: &s.bucket, Prefix: aws.String(s.key(prefix)), MaxKeys: aws.Int32(int32(min(max, 1000)))}
	byName := map[string]*indexEntry{}
	current := map[string]bool{}
	var order []string
	p := s3.NewListObjectVersionsPaginator(s.client, in)
	for p.HasMorePages() && len(current) < max {
		page, err := p.NextPage(ctx, s.dated)
		if err != nil {
			return nil, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, s.key(prefix), err)
		}
		add := func(key, id string, latest, marker bool) {
			name := strings.TrimPrefix(key, s.prefix)
			e, ok := byName[name]
			if !ok {
				e = &indexEntry{name: name}
				byName[name] = e
				order = append(order, name)
			}
			if latest {
				e.versions = append([]string{id}, e.versions...)
				if !marker {
					current[name] = true
				}
			} else {
				e.versions = append(e.versions, id)
			}
		}
		for _, v := range page.Versions {
			add(aws.ToString(v.Key), aws.ToString(v.VersionId), aws.ToBool(v.IsLatest), false)
		}
		for _, m := range page.DeleteMarkers {
			add(aws.ToString(m.Key), aws.ToString(m.VersionId), aws.ToBool(m.IsLatest), true)
		}
	}
	sort.Strings(order)
	var out []indexEntry
	for _, n := range order {
		if current[n] && len(out) < max {
			out = append(out, *byName[n])
		}
	}
	return out, nil
}

// dropIndex deletes the listed versions of an index entry, oldest first. A version written
// after the listing (the same entry written again) survives.
func (s *store) dropIndex(ctx context.Context, e indexEntry) error {
	for i := len(e.versions) - 1; i >= 0; i-- {
		if err := s.deleteVersion(ctx, e.name, e.versions[i]); err != nil {
			return err
		}
	}
	return nil
}

// list returns up to max names under prefix after startAfter (names without the store
// prefix), and whether more remain. Every page is one request; any failure is an error.
func (s *store) list(ctx context.Context, prefix, startAfter string, max int) ([]string, bool, error) {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.key(prefix)), MaxKeys: aws.Int32(int32(min(max, 1000)))}
	if startAfter != "" {
		in.StartAfter = aws.String(s.key(startAfter))
	}
	var names []string
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() && len(names) < max {
		page, err := p.NextPage(ctx, s.dated)
		if err != nil {
			return nil, false, fmt.Errorf("%w: list %s: %v", ledger.ErrUnavailable, s.key(prefix), err)
		}
		for _, o := range page.Contents {
			names = append(names, strings.TrimPrefix(aws.ToString(o.Key), s.prefix))
		}
	}
	more := p.HasMorePages() || len(names) > max
	if len(names) > max {
		names = names[:max]
	}
	return names, more, nil
}

// requireVersioning fails unless the bucket keeps versions: the ledger never deletes by key
// alone, and a bucket without versions cannot delete anything else.
func (s *store) requireVersioning(ctx context.Context) error {
	out, err := s.client.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &s.bucket}, s.dated)
	if err != nil {
		return fmt.Errorf("%w: read the versioning of bucket %s: %v", ledger.ErrUnavailable, s.bucket, err)
	}
	if out.Status != types.BucketVersioningStatusEnabled {
		return fmt.Errorf("%w: bucket versioning is not enabled on bucket %s (status %q): the S3 ledger deletes rows by version id so that a late DELETE "+
			"can never remove a row written after it was judged. Enable it with `aws s3api put-bucket-versioning --bucket %s "+
			"--versioning-configuration Status=Enabled` (or `amiss ledger s3-setup -root s3://%s/%s` on MinIO), and expire "+
			"noncurrent versions with a lifecycle rule (docs/s3-ledger.md)",
			ledger.ErrRootMismatch, s.bucket, out.Status, s.bucket, s.bucket, s.prefix)
	}
	return nil
}

func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func isPrecondition(err error) bool {
	if st := httpStatus(err); st == http.StatusPreconditionFailed || st == http.StatusConflict {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "PreconditionFailed", "ConditionalRequestConflict":
			return true
		}
	}
	return false
}

func tokenOf(body []byte) string {
	var env struct {
		Token string `json:"token"`
	}
	if json.Unmarshal(body, &env) != nil {
		return ""
	}
	return env.Token
}
