package bus

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStoreFull is a write that JetStream refused because the stream, KV
// bucket or object store it went to holds its limit (Topology.Limits).
// Nothing was dropped to make room: the writer retries later, and an
// operator frees room (`arena gc`, which collects unneeded artifacts) or
// raises the limit (`provision --js-...`). Errors that wrap it name the
// store.
var ErrStoreFull = errors.New("jetstream_store_full: the JetStream store is at its limit")

// errCodeStoreFailed is JetStream's "stream store failed" (10077), the
// code of a message refused by a DiscardNew limit; nats.go names no
// constant for it.
const errCodeStoreFailed jetstream.ErrorCode = 10077

// Full tells a write refused because its stream is at its MaxBytes or
// MaxMsgs (DiscardNew) from other errors.
func Full(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrStoreFull) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed {
		return true
	}
	// An object store's chunks are published asynchronously and their
	// refusals reach Put as plain errors that carry the server's text.
	msg := err.Error()
	return strings.Contains(msg, "maximum bytes exceeded") || strings.Contains(msg, "maximum messages exceeded")
}

// storeFull wraps err with ErrStoreFull and the store's name when it is
// a refusal for lack of room, and returns it as it is otherwise.
func storeFull(err error, kind, name string) error {
	if !Full(err) || errors.Is(err, ErrStoreFull) {
		return err
	}
	return fmt.Errorf("%w: %s %s is full (raise its limit or free room: arena gc): %w", ErrStoreFull, kind, name, err)
}

// FullObjectStore is err wrapped with ErrStoreFull and the object store
// bucket's name when JetStream refused a put into bucket for lack of room.
func FullObjectStore(err error, bucket string) error { return storeFull(err, "object store", bucket) }
