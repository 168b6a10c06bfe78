package bus_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestPutObjectWaitsOutAnOutage: a put that JetStream stops answering
// midway (in a cluster, the bucket's stream electing a leader; here the
// server's JetStream switched off after the third chunk and on again
// 1.5 s later) starts again from the first byte and stores the object
// once, whole; an outage longer than PutRetry.Outage, and a bucket that
// is not there, fail with the error that says so, the latter at once.
func TestPutObjectWaitsOutAnOutage(t *testing.T) {
	body := make([]byte, 1<<20) // 8 chunks of the object store's 128 KiB
	_, err := rand.Read(body)
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		bucket  string
		mend    bool // JetStream comes back 1.5 s after it went
		off     bool // JetStream goes away mid-put
		wantErr string
	}{
		{name: "JetStream away mid-put for 1.5 s", bucket: bus.ObjectUploads, off: true, mend: true},
		{name: "JetStream away for good", bucket: bus.ObjectUploads, off: true, wantErr: "answered no put of"},
		{name: "no such bucket", bucket: "no-such-bucket", wantErr: "bucket not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := bustest.Server(t, dir)
			b, err := bus.New(bustest.Connect(t, s))
			require.NoError(t, err)
			require.NoError(t, bus.Provision(tctx(t), b.JetStream(), bus.Topology{}))

			var tries, reads atomic.Int32
			var once sync.Once
			mended := make(chan error, 1)
			var retried []error
			put := bus.PutRetry{Outage: 3 * time.Second, Pause: 200 * time.Millisecond,
				Wrap: func(r io.Reader) io.Reader {
					tries.Add(1)
					return readFunc(func(p []byte) (int, error) {
						if reads.Add(1) == 4 && tc.off {
							once.Do(func() {
								require.NoError(t, s.DisableJetStream())
								go func() {
									if !tc.mend {
										mended <- nil
										return
									}
									time.Sleep(1500 * time.Millisecond)
									mended <- s.EnableJetStream(&server.JetStreamConfig{StoreDir: dir})
								}()
							})
						}
						return r.Read(p)
					})
				},
				Retried: func(err error) { retried = append(retried, err) },
			}
			// No deadline, as the CLI's: nats.go bounds each request and
			// chunk ack by its default 5 s. The test's own bound:
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			watchdog := time.AfterFunc(60*time.Second, cancel)
			defer watchdog.Stop()
			start := time.Now()
			meta := jetstream.ObjectMeta{Name: "bundle.tar.gz"}
			info, err := bus.PutObject(ctx, b.JetStream(), tc.bucket, meta, bytes.NewReader(body), put)
			require.NoError(t, ctx.Err(), "the put hung")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if !tc.off {
					require.Empty(t, retried, "a missing bucket is not waited for")
					require.Less(t, time.Since(start), put.Outage, "a missing bucket fails at once")
				}
				return
			}
			require.NoError(t, err)
			require.NoError(t, <-mended)
			require.NotEmpty(t, retried)
			t.Logf("interrupted by: %v", retried[0])
			require.True(t, bus.Interrupted(retried[0]), "%v", retried[0])
			require.GreaterOrEqual(t, tries.Load(), int32(2), "started again")
			require.Equal(t, uint64(len(body)), info.Size)

			store, err := b.JetStream().ObjectStore(tctx(t), tc.bucket)
			require.NoError(t, err)
			got, err := store.GetBytes(tctx(t), meta.Name)
			require.NoError(t, err)
			require.True(t, bytes.Equal(body, got), "stored whole")
			objects, err := store.List(tctx(t))
			require.NoError(t, err)
			require.Len(t, objects, 1, "stored once")
		})
	}
}

// TestInterrupted: what passes by itself, however wrapped, from what does not.
func TestInterrupted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{jetstream.ErrAsyncPublishTimeout, true},
		{jetstream.ErrNoStreamResponse, true},
		{context.DeadlineExceeded, true},
		{jetstream.ErrBucketNotFound, false},
		{jetstream.ErrStreamNotFound, false},
		{context.Canceled, false},
		{io.ErrUnexpectedEOF, false},
	} {
		require.Equal(t, tc.want, bus.Interrupted(tc.err), "%v", tc.err)
		require.Equal(t, tc.want, bus.Interrupted(fmt.Errorf("bus: put x: %w", tc.err)), "wrapped %v", tc.err)
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }
