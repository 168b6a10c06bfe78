package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestUnavailable: `arena watch` waits out a JetStream that answers
// nobody for a moment (a cluster electing a stream leader), however the
// client wraps it, and gives up at once on what will not pass.
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("nats: consumer create: %w", nats.ErrNoResponders), true},
		{jetstream.ErrNoStreamResponse, true},
		{jetstream.ErrConsumerNotFound, true},
		{nats.ErrConnectionReconnecting, true},
		{jetstream.ErrStreamNotFound, false},
		{nats.ErrAuthorization, false},
		{nats.ErrConnectionClosed, false},
		{errors.New("permissions violation"), false},
		{context.Canceled, false},
	} {
		require.Equal(t, tc.want, unavailable(tc.err), "%v", tc.err)
	}
}
