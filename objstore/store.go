package objstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/amiss-ci/amiss/ledger"
)

// store is the handful of S3 calls the ledger makes, with the ambiguity of each settled.
type store struct {
	client *s3.Client
	bucket string
	prefix string
}

var (
	errNotFound = errors.New("object not found")
	// errRaced: a conditional write lost to another writer (412, or 409 for a concurrent
	// conditional write), and the object does not hold our token.
	errRaced = errors.New("conditional write lost")
)

type object struct {
	body []byte
	etag string
}

func (s *store) key(name string) string { return s.prefix + name }

func (s *store) get(ctx context.Context, name string) (object, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) || httpStatus(err) == http.StatusNotFound {
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
	return object{body: body, etag: aws.ToString(out.ETag)}, nil
}

// put writes body (which carries token) with a condition: ifNoneMatch for a creation, or
// ifMatch with the ETag that was read. A 412 or 409, or a transport error, is settled by
// reading the object back: our token there means the write landed and only its answer was
// lost.
func (s *store) put(ctx context.Context, name string, body []byte, token, ifMatch string, create bool) (string, error) {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name)), Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json")}
	switch {
	case create:
		in.IfNoneMatch = aws.String("*")
	case ifMatch != "":
		in.IfMatch = aws.String(ifMatch)
	}
	out, err := s.client.PutObject(ctx, in)
	if err == nil {
		return aws.ToString(out.ETag), nil
	}
	raced := isPrecondition(err)
	back, gerr := s.get(ctx, name)
	if gerr == nil && token != "" && tokenOf(back.body) == token {
		return back.etag, nil
	}
	if raced {
		return "", errRaced
	}
	return "", fmt.Errorf("%w: put %s: %v", ledger.ErrUnavailable, s.key(name), err)
}

// putPlain writes an object unconditionally (index entries, which carry no state).
func (s *store) putPlain(ctx context.Context, name string, body []byte) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name)),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
	if err != nil {
		return fmt.Errorf("%w: put %s: %v", ledger.ErrUnavailable, s.key(name), err)
	}
	return nil
}

// deleteOnce sends one DELETE, without SDK retries, with If-Match (honoured by AWS, ignored by
// MinIO). An error is ambiguous: the caller settles it by reading back.
func (s *store) deleteOnce(ctx context.Context, name, ifMatch string) error {
	in := &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.key(name))}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	_, err := s.client.DeleteObject(ctx, in, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	if err != nil {
		if isPrecondition(err) {
			return errRaced
		}
		if httpStatus(err) == http.StatusNotFound {
			return nil
		}
		return fmt.Errorf("%w: delete %s: %v", ledger.ErrUnavailable, s.key(name), err)
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
		page, err := p.NextPage(ctx)
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
