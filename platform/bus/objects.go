package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PutRetry says how PutObject waits out a JetStream that does not answer.
// The zero value waits up to a minute, a second between tries, silently.
type PutRetry struct {
	// Outage is how long, from the first interruption, PutObject goes on
	// starting the put again (default a minute).
	Outage time.Duration
	// Pause is the wait before each new try (default a second).
	Pause time.Duration
	// Wrap, when set, wraps the reader of each try (a progress meter).
	Wrap func(io.Reader) io.Reader
	// Retried, when set, is told of each interruption before the pause.
	Retried func(err error)
}

func (o PutRetry) withDefaults() PutRetry {
	if o.Outage <= 0 {
		o.Outage = time.Minute
	}
	if o.Pause <= 0 {
		o.Pause = time.Second
	}
	return o
}

// PutObject puts what r holds into the object store bucket as meta.
//
// A cluster that loses a node mid-put answers no chunk for a few seconds
// while it elects the bucket stream's leader: nats.go then gives "timeout
// waiting for ack", "no response from stream" or a request's timeout (seen
// in the chaos runs: a participant's upload failed while the arena went
// on). Such a put starts again from r's first byte under the same name,
// for up to o.Outage: the object store's Put replaces what an earlier put
// of that name stored and purges an interrupted put's chunks, so the
// object is stored once, whole. Any other error (Interrupted says which),
// and ctx ending, fail at once.
//
// The requests and chunk acks of one try are bounded by the JetStream
// context's default timeout only when ctx has no deadline (nats.go's
// rule): give it a context without one for a put of unknown length.
func PutObject(ctx context.Context, js jetstream.JetStream, bucket string, meta jetstream.ObjectMeta, r io.ReadSeeker, o PutRetry) (*jetstream.ObjectInfo, error) {
	o = o.withDefaults()
	var giveUp time.Time
	for {
		info, err := putObjectOnce(ctx, js, bucket, meta, r, o.Wrap)
		if err == nil {
			return info, nil
		}
		if ctx.Err() != nil || !Interrupted(err) {
			return nil, err
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(o.Outage)
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("%w (NATS answered no put of %s for %s)", err, meta.Name, o.Outage)
		}
		if o.Retried != nil {
			o.Retried(err)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(o.Pause):
		}
	}
}

// putObjectOnce is one try of PutObject, from r's first byte.
func putObjectOnce(ctx context.Context, js jetstream.JetStream, bucket string, meta jetstream.ObjectMeta, r io.ReadSeeker, wrap func(io.Reader) io.Reader) (*jetstream.ObjectInfo, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("bus: put %s: %w", meta.Name, err)
	}
	store, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bus: open object store %s: %w", bucket, err)
	}
	var in io.Reader = r
	if wrap != nil {
		in = wrap(r)
	}
	info, err := store.Put(ctx, meta, in)
	if err != nil {
		return nil, fmt.Errorf("bus: put %s into %s: %w", meta.Name, bucket, FullObjectStore(err, bucket))
	}
	return info, nil
}

// Interrupted tells the errors of a JetStream that answers nobody for a
// moment (a stream electing its leader, a node restarting, a client
// reconnecting) from those that will not pass by themselves (a bucket
// that is not there, a permission, a full store, a context that ended).
func Interrupted(err error) bool {
	return Unanswered(err) || errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded)
}

// Unanswered tells the errors of a JetStream that is there but answers
// nobody for a moment (no responders: no stream leader yet, a node
// restarting; a client reconnecting). Interrupted adds the timeouts of a
// request or an ack that such a JetStream let run out.
func Unanswered(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrConnectionReconnecting)
}
