package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ce"
)

// Last reads the newest event of topic t about id from stream (the one
// stored last on its subject) and decodes its payload. ok is false when
// the stream holds none, or id cannot name a subject. It is how a service
// reads an event its consumer has not handed it yet (a score entry whose
// outcomes were joined before its submission.received).
func Last[T any](ctx context.Context, stream jetstream.Stream, t events.Topic[T], id string) (v T, ok bool, err error) {
	subject, err := events.Subject(t.Type(), id)
	if err != nil {
		return v, false, nil
	}
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return v, false, nil
	} else if err != nil {
		return v, false, fmt.Errorf("bus: read %s: %w", subject, err)
	}
	e, err := ce.Decode(m.Header, m.Data)
	if err != nil {
		return v, false, fmt.Errorf("bus: %s: %w", subject, err)
	}
	if v, err = t.Decode(e); err != nil {
		return v, false, fmt.Errorf("bus: %s: %w", subject, err)
	}
	return v, true, nil
}
