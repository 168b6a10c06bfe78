package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestPlacedWaitsForPeers: Provision runs a create again while the cluster
// has no suitable peers online, and returns at once any other error.
func TestPlacedWaitsForPeers(t *testing.T) {
	noPeers := &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement, peer offline"}
	other := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad request"}
	for _, tc := range []struct {
		name    string
		errs    []error // what each call returns; nil once it succeeds
		wait    time.Duration
		calls   int
		wantErr error
	}{
		{"placed at once", []error{nil}, time.Minute, 1, nil},
		{"a peer comes back", []error{noPeers, noPeers, nil}, time.Minute, 3, nil},
		{"wrapped as the client wraps it", []error{errors.Join(errors.New("nats: API error"), noPeers), nil}, time.Minute, 2, nil},
		{"another error is not waited on", []error{other, nil}, time.Minute, 1, other},
		{"a peer that stays offline", []error{noPeers, noPeers, noPeers, noPeers, noPeers, noPeers, noPeers, noPeers}, 150 * time.Millisecond, 0, noPeers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := placementWait
			placementWait = tc.wait
			t.Cleanup(func() { placementWait = old })
			calls := 0
			err := placed(context.Background(), func() error {
				calls++
				return tc.errs[min(calls, len(tc.errs))-1]
			})
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			if tc.calls > 0 {
				require.Equal(t, tc.calls, calls)
			} else {
				require.Greater(t, calls, 1, "tried again before giving up")
				require.Less(t, calls, len(tc.errs), "gave up once its wait was over")
			}
		})
	}
}
