package bus

import (
	"errors"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

var keyUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// Key joins parts into a KV key, one dot-separated token each, with every
// character a token may not hold (dots, slashes, '@', spaces) replaced by
// '_', so that names like "lowb-gen@1/dev" can stand in a key.
func Key(parts ...string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = keyUnsafe.ReplaceAllString(p, "_")
	}
	return strings.Join(out, ".")
}

// Conflict reports whether a KV Create or Update lost a race: the key
// exists, or its revision moved. The caller reads again and retries.
//
// A single-replica bucket reports a lost race as API error 10071 (wrong
// last sequence); a replicated one (R3, as on a cluster) as 10164, which
// nats.go maps to ErrKeyRevisionMismatch on Update and wraps in
// ErrKeyExists on Create. Every form counts.
func Conflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
