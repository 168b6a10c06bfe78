package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
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

// TestUploadsKnowTheirDigest: an upload opened from the object store
// carries the sha256 the store holds for it, so the build need not hash
// it again (verifiedUpload), and its reader gives its bytes whole.
func TestUploadsKnowTheirDigest(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	body := []byte(strings.Repeat("an uploaded archive ", 20_000))
	store, err := b.JetStream().ObjectStore(ctx, bus.ObjectUploads)
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, "digest.tar.gz", body)
	require.NoError(t, err)

	r, err := JetStreamUploads{JS: b.JetStream()}.Open(ctx, events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: "digest.tar.gz"})
	require.NoError(t, err)
	defer r.Close()
	v, ok := r.(verifiedUpload)
	require.True(t, ok, "the object store's upload checks its own digest")
	sum := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(sum[:]), v.SHA256())
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, body, got)
}
