package app

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/platform/bus"
)

// Environment variables of the JetStream limits (bus.Limits) that a
// service's provisioning and `arena up` apply. Every process that
// provisions the arena must be given the same values, or the last to
// provision wins.
const (
	EnvJSVolume            = "LOWBARENA_JS_VOLUME"
	EnvJSArenaMaxBytes     = "LOWBARENA_JS_ARENA_MAX_BYTES"
	EnvJSUploadsMaxBytes   = "LOWBARENA_JS_UPLOADS_MAX_BYTES"
	EnvJSUploadsMaxAge     = "LOWBARENA_JS_UPLOADS_MAX_AGE"
	EnvJSArtifactsMaxBytes = "LOWBARENA_JS_ARTIFACTS_MAX_BYTES"
)

// LimitsFromEnv reads the JetStream limits from the environment. A
// malformed value is kept as -1 and reported by ValidateLimits, rather
// than silently replaced by its default.
func LimitsFromEnv() bus.Limits {
	var l bus.Limits
	for _, v := range []struct {
		env string
		to  *int64
	}{
		{EnvJSVolume, &l.Volume}, {EnvJSArenaMaxBytes, &l.ArenaMaxBytes},
		{EnvJSUploadsMaxBytes, &l.UploadsMaxBytes}, {EnvJSArtifactsMaxBytes, &l.ArtifactsMaxBytes},
	} {
		if s := os.Getenv(v.env); s != "" {
			n, err := ParseBytes(s)
			if err != nil {
				n = -1
			}
			*v.to = n
		}
	}
	if s := os.Getenv(EnvJSUploadsMaxAge); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			d = -1
		}
		l.UploadsMaxAge = d
	}
	return l
}

// RegisterLimitFlags adds the JetStream limits' flags to fs, with l's
// values as defaults (zero: bus.Limits' default).
func RegisterLimitFlags(fs *flag.FlagSet, l *bus.Limits) {
	fs.Var((*bytesFlag)(&l.Volume), "js-volume",
		"bytes JetStream may store on each node (its max_file_store), e.g. 200GiB; the limits not set below are shares of it (default 20GiB) (env "+EnvJSVolume+")")
	fs.Var((*bytesFlag)(&l.ArenaMaxBytes), "js-arena-max-bytes",
		"most bytes of the ARENA event log per node; once full it refuses new events (default 10% of --js-volume) (env "+EnvJSArenaMaxBytes+")")
	fs.Var((*bytesFlag)(&l.UploadsMaxBytes), "js-uploads-max-bytes",
		"most bytes of the uploads object store per node (default 25% of --js-volume) (env "+EnvJSUploadsMaxBytes+")")
	fs.DurationVar(&l.UploadsMaxAge, "js-uploads-max-age", l.UploadsMaxAge,
		"how long an upload never built is kept (default 168h) (env "+EnvJSUploadsMaxAge+")")
	fs.Var((*bytesFlag)(&l.ArtifactsMaxBytes), "js-artifacts-max-bytes",
		"most bytes of the artifacts object store per node (default 45% of --js-volume) (env "+EnvJSArtifactsMaxBytes+")")
}

// ValidateLimits returns the problems of l: a malformed value, or limits
// that do not fit their volume.
func ValidateLimits(l bus.Limits) []string {
	var errs []string
	for _, v := range []struct {
		name string
		n    int64
	}{
		{"js-volume", l.Volume}, {"js-arena-max-bytes", l.ArenaMaxBytes},
		{"js-uploads-max-bytes", l.UploadsMaxBytes}, {"js-artifacts-max-bytes", l.ArtifactsMaxBytes},
	} {
		if v.n < 0 {
			errs = append(errs, fmt.Sprintf("%s: not a size (e.g. 20GiB, 512MiB or bytes)", v.name))
		}
	}
	if l.UploadsMaxAge < 0 {
		errs = append(errs, "js-uploads-max-age: not a duration (e.g. 168h)")
	}
	if len(errs) > 0 {
		return errs
	}
	if err := l.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

// byteUnits are the suffixes ParseBytes takes, binary as NATS's own
// (max_file_store: 20GB is 20 GiB).
var byteUnits = []struct {
	suffix string
	shift  uint
}{
	{"TIB", 40}, {"GIB", 30}, {"MIB", 20}, {"KIB", 10},
	{"TB", 40}, {"GB", 30}, {"MB", 20}, {"KB", 10},
	{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0},
}

// ParseBytes reads a size: a whole number of bytes, or one with a binary
// unit (K, M, G, T, with or without B or iB: 20GiB, 20GB and 20G are all
// 20 × 2³⁰, as NATS reads them).
func ParseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	shift := uint(0)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a whole number of bytes, or one with K, M, G or T (binary units)", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n << shift, nil
}

// FormatBytes writes n in the largest binary unit that divides it.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// bytesFlag is a size flag (ParseBytes); zero prints as empty, the
// default being bus.Limits'.
type bytesFlag int64

func (b *bytesFlag) String() string {
	if b == nil || *b == 0 {
		return ""
	}
	return FormatBytes(int64(*b))
}

func (b *bytesFlag) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = bytesFlag(n)
	return nil
}
