package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestSubmitUploadWaitsOutAnOutage: an upload that JetStream does not
// answer for a moment (a cluster electing the uploads stream's leader;
// here the server's JetStream switched off, then on again) starts again
// and stores the bundle once, whole; an outage longer than uploadOutage,
// and a bucket that is not there, fail with the error that says so.
func TestSubmitUploadWaitsOutAnOutage(t *testing.T) {
	defer func(o, p time.Duration) { uploadOutage, uploadPause = o, p }(uploadOutage, uploadPause)
	uploadOutage, uploadPause = 3*time.Second, 200*time.Millisecond

	for _, tc := range []struct {
		name string
		// fault breaks the arena before the submit and returns what
		// mends it, run 1.5 s into the submit (nil: nothing mends it).
		fault   func(t *testing.T, s *server.Server, b *bus.Bus, dir string) func() error
		wantErr string
	}{
		{name: "JetStream away for 1.5 s", fault: func(t *testing.T, s *server.Server, _ *bus.Bus, dir string) func() error {
			require.NoError(t, s.DisableJetStream())
			return func() error { return s.EnableJetStream(&server.JetStreamConfig{StoreDir: dir}) }
		}},
		{name: "JetStream away for good", wantErr: "answered no put of", fault: func(t *testing.T, s *server.Server, _ *bus.Bus, _ string) func() error {
			require.NoError(t, s.DisableJetStream())
			return nil
		}},
		{name: "no uploads bucket", wantErr: "open object store uploads", fault: func(t *testing.T, _ *server.Server, b *bus.Bus, _ string) func() error {
			require.NoError(t, b.JetStream().DeleteObjectStore(context.Background(), bus.ObjectUploads))
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dir := t.TempDir()
			s := bustest.Server(t, dir)
			nc := bustest.Connect(t, s)
			b, err := bus.New(nc)
			require.NoError(t, err)
			require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{}))
			c := &client{nc: nc, js: b.JetStream()}
			p, err := prepare(bundleDir("fp8-w8a8"), defaultMaxUpload)
			require.NoError(t, err)
			defer p.close()

			mend := tc.fault(t, s, b, dir)
			mended := make(chan error, 1)
			if mend != nil {
				go func() {
					time.Sleep(1500 * time.Millisecond)
					mended <- mend()
				}()
			}
			// The CLI's context has no deadline (a signal ends it), so
			// nats.go bounds each request and each chunk's ack by its
			// default timeout of 5 s; so does this one.
			var progress bytes.Buffer
			start := time.Now()
			type result struct {
				id  string
				err error
			}
			done := make(chan result, 1)
			go func() {
				sctx, stop := context.WithCancel(context.Background())
				defer stop()
				id, err := submit(sctx, c, p, &progress)
				done <- result{id, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				require.FailNow(t, "the submit hung")
			}
			id, err := r.id, r.err
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.name == "no uploads bucket" {
					require.NotContains(t, progress.String(), "interrupted", "a missing bucket is not waited for")
					require.Less(t, time.Since(start), uploadOutage, "a missing bucket fails at once")
				}
				return
			}
			require.NoError(t, err)
			require.NoError(t, <-mended)
			require.Contains(t, progress.String(), "upload of fp8-w8a8 interrupted")

			js := b.JetStream()
			store, err := js.ObjectStore(ctx, bus.ObjectUploads)
			require.NoError(t, err)
			data, err := store.GetBytes(ctx, id+".tar.gz")
			require.NoError(t, err)
			sum := sha256.Sum256(data)
			require.Equal(t, p.sum.SHA256, hex.EncodeToString(sum[:]), "the bundle stored whole")
			objects, err := store.List(ctx)
			require.NoError(t, err)
			require.Len(t, objects, 1, "stored once")

			var received int
			for _, e := range bustest.Stored(t, b, "arena.>") {
				if e.Type() == string(events.SubmissionReceived) && e.Subject() == id {
					received++
				}
			}
			require.Equal(t, 1, received, "submission.received published once")
		})
	}
}
