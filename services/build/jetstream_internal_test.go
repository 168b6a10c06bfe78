package build

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestSettled: an upload a lagging replica does not hold yet is looked
// for again until one answers with it; one that stays missing, or
// another error, is returned.
func TestSettled(t *testing.T) {
	other := errors.New("nats: timeout")
	for _, tc := range []struct {
		name      string
		answers   []error // nil: found
		settle    time.Duration
		wantErr   error
		wantCalls int
	}{
		{"found at once", []error{nil}, time.Minute, nil, 1},
		{"missing on two replicas, then found", []error{jetstream.ErrObjectNotFound, jetstream.ErrObjectNotFound, nil}, time.Minute, nil, 3},
		{"another error is not waited on", []error{other}, time.Minute, other, 1},
		{"missing past the bound", []error{jetstream.ErrObjectNotFound, jetstream.ErrObjectNotFound, jetstream.ErrObjectNotFound,
			jetstream.ErrObjectNotFound, jetstream.ErrObjectNotFound}, 250 * time.Millisecond, jetstream.ErrObjectNotFound, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			r, err := settled(context.Background(), tc.settle, func() (io.ReadCloser, error) {
				err := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				if err != nil {
					return nil, err
				}
				return io.NopCloser(strings.NewReader("archive")), nil
			})
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Nil(t, r)
			} else {
				require.NoError(t, err)
				require.NotNil(t, r)
			}
			if tc.wantCalls > 0 {
				require.Equal(t, tc.wantCalls, calls)
			} else {
				require.Greater(t, calls, 1, "it looked again before giving up")
				require.Less(t, calls, 5, "it gave up at its bound")
			}
		})
	}
}
