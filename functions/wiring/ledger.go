package wiring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/amiss-ci/amiss/functions/config"
	"github.com/amiss-ci/amiss/ledger"
	"github.com/amiss-ci/amiss/localfs"
	"github.com/amiss-ci/amiss/objstore"
)

// A Location is where a ledger lives: an S3 bucket and prefix when Bucket is set, otherwise a
// FileLedger root folder.
type Location struct {
	// Spec is the location as it was given; messages name the ledger by it.
	Spec string
	// Dir is a FileLedger root folder.
	Dir string
	// Bucket and Prefix locate an S3 ledger; Prefix is empty or ends with "/".
	Bucket, Prefix string
}

// ParseLocation parses where a ledger lives: file:DIR (a FileLedger root folder) or
// s3://bucket/prefix/ (an S3 ledger; a prefix without a final "/" gets one). With folders
// (an operator's -root flag) any other spec is a folder; without it (AMISS_LEDGER, which must
// say which backend it means) it is refused. from names where the spec came from in errors.
func ParseLocation(spec, from string, folders bool) (Location, error) {
	switch {
	case strings.HasPrefix(spec, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(spec, "s3://"), "/")
		if bucket == "" {
			return Location{}, fmt.Errorf("%s: %q names no bucket", from, spec)
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		return Location{Spec: spec, Bucket: bucket, Prefix: prefix}, nil
	case strings.HasPrefix(spec, "file:"):
		return Location{Spec: spec, Dir: strings.TrimPrefix(spec, "file:")}, nil
	case spec == "":
		return Location{}, errors.New(from + " is not set (file:/path or s3://bucket/prefix/)")
	case folders:
		return Location{Spec: spec, Dir: spec}, nil
	}
	return Location{}, fmt.Errorf("%s: %q is neither file:/path nor s3://bucket/prefix/", from, spec)
}

// LedgerOptions say how OpenLedger opens a ledger.
type LedgerOptions struct {
	// From names where the spec came from, in errors (default AMISS_LEDGER).
	From string
	// Folders: a spec that is neither file: nor s3:// is a FileLedger folder (an operator's
	// -root flag). Otherwise such a spec is refused.
	Folders bool
	// Config, when set, gives the limits: a missing root is created with them, and a root
	// created with others is refused with each differing setting named in the
	// configuration's terms (see LimitsError). Nil: the root must exist, and is opened with
	// the limits it records (an operator's command on any root).
	Config *config.Config
	// Prepare prepares a FileLedger root (recovers an interrupted cleanup, collects debris):
	// for a long-lived process and for cleanup. Otherwise the root is only opened, which reads
	// no folder: a Lambda cold start. An S3 ledger needs no preparation.
	Prepare bool
	// StrandedAfter is the idle time after which cleanup reports an unfinished row (zero: the
	// backend's default).
	StrandedAfter time.Duration
	// ReadOnly opens the ledger without changing what it holds: a FileLedger root of an
	// older format, which opening would migrate in place, is refused (ErrOlderFormat) and
	// left as it is. For commands that only read, and for those that do not say they
	// migrate.
	ReadOnly bool
}

// ErrOlderFormat: the root is of an older format that opening would migrate, and the caller
// asked not to change it (LedgerOptions.ReadOnly).
var ErrOlderFormat = errors.New("the ledger root is of an older format")

// OpenLedger opens the ledger spec names (see ParseLocation): the one way the Lambda
// functions, amiss serve and the operator commands open a ledger, so that they read a spec
// alike. An S3 ledger uses the region and credentials of the default chain and
// AMISS_S3_ENDPOINT (see S3Client). The result is a *localfs.Ledger or an *objstore.Ledger.
func OpenLedger(ctx context.Context, spec string, o LedgerOptions) (ledger.Ledger, error) {
	if o.From == "" {
		o.From = EnvLedger
	}
	loc, err := ParseLocation(spec, o.From, o.Folders)
	if err != nil {
		return nil, err
	}
	var client *s3.Client
	if loc.Bucket != "" {
		if client, err = S3Client(ctx, loc.Spec); err != nil {
			return nil, err
		}
	}
	create := o.Config != nil
	var limits ledger.Limits
	if create {
		limits = o.Config.Limits()
	} else if limits, err = storedLimits(ctx, loc, client); err != nil {
		return nil, err
	}
	var l ledger.Ledger
	if client == nil && o.ReadOnly {
		if err := refuseOlderFormat(loc); err != nil {
			return nil, err
		}
	}
	if client == nil {
		c := localfs.Config{Limits: limits, Create: create, StrandedAfter: o.StrandedAfter}
		if o.Prepare {
			l, err = localfs.Prepare(ctx, loc.Dir, c)
		} else {
			l, err = localfs.Open(ctx, loc.Dir, c)
		}
	} else {
		l, err = objstore.Open(ctx, objstore.Config{Client: client, Bucket: loc.Bucket, Prefix: loc.Prefix, Limits: limits,
			Create: create, StrandedAfter: o.StrandedAfter})
	}
	if err != nil {
		if errors.Is(err, ledger.ErrRootMismatch) && create {
			if stored, rerr := storedLimits(ctx, loc, client); rerr == nil {
				if lerr := LimitsError(o.Config, loc.Spec, stored); lerr != nil {
					return nil, lerr
				}
			}
		}
		return nil, err
	}
	return l, nil
}

// StoredLimits reads the limits the ledger at loc records, without opening it. A missing
// root is an error wrapping ledger.ErrRootMismatch.
func StoredLimits(ctx context.Context, loc Location) (ledger.Limits, error) {
	var client *s3.Client
	if loc.Bucket != "" {
		var err error
		if client, err = S3Client(ctx, loc.Spec); err != nil {
			return ledger.Limits{}, err
		}
	}
	return storedLimits(ctx, loc, client)
}

// storedLimits reads the limits a root records: a folder's, or with client an S3 ledger's.
func storedLimits(ctx context.Context, loc Location, client *s3.Client) (ledger.Limits, error) {
	if client == nil {
		return localfs.ReadLimits(loc.Dir, nil)
	}
	return objstore.ReadLimits(ctx, client, loc.Bucket, loc.Prefix)
}

// FileRootFormat reads the format version of the FileLedger root at dir from its root state's
// frame header ("AMISS", the kind byte, then the version; docs/file-ledger.md), without
// decoding or changing anything.
func FileRootFormat(dir string) (int, error) {
	f, err := os.Open(filepath.Join(dir, localfs.RootFile))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var head [8]byte
	if _, err := io.ReadFull(f, head[:]); err != nil || string(head[:5]) != "AMISS" || head[5] != 'R' {
		return 0, fmt.Errorf("%w: %s has no root state header", ledger.ErrCorrupt, filepath.Join(dir, localfs.RootFile))
	}
	return int(binary.BigEndian.Uint16(head[6:])), nil
}

// refuseOlderFormat refuses a FileLedger root of an older format that this build migrates
// when it opens it. A retired format is left to Open, which refuses it with its own remedy,
// and so is a root whose state cannot be read.
func refuseOlderFormat(loc Location) error {
	v, err := FileRootFormat(loc.Dir)
	if err != nil || v >= localfs.FormatVersion {
		return nil
	}
	if _, err := localfs.ReadLimits(loc.Dir, nil); err != nil {
		return nil // a retired format: Open says what it was and what to do
	}
	return fmt.Errorf("%w: %s is a format %d root, and opening it would migrate it to format %d in place (a format %d process "+
		"still running on it refuses it from then on). This command does not change the ledger: migrate it first with "+
		"amiss ledger migrate -root %s (amiss serve and the Lambda functions also migrate it when they open it)",
		ErrOlderFormat, loc.Spec, v, localfs.FormatVersion, v, loc.Spec)
}
