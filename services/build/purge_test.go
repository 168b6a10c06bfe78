package build_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/build"
)

// TestUploadDeletedOnceBuilt: once the build has published a
// submission's outcome, completed or failed, it deletes the upload; a
// submission.received delivered again after that (a redelivery whose
// ack was lost) is acked as settled: no second outcome, no
// bundle_not_found for the upload it deleted, nothing dead-lettered.
func TestUploadDeletedOnceBuilt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		announce string // "" announces the archive's own digest
		want     events.Type
		reason   string
	}{
		{"built", "", events.BuildCompleted, ""},
		{"refused", hex.EncodeToString(make([]byte, 32)), events.BuildFailed, string(reason.BundleDigestMismatch)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t)
			id := "purge-" + tc.name
			archive := pack(t, folder(t, goodFiles()))
			h.upload(id, archive, tc.announce)
			e := h.outcome(id)
			require.Equal(t, string(tc.want), e.Type())
			if tc.reason != "" {
				var failed events.StageFailedData
				require.NoError(t, e.DataAs(&failed))
				require.Equal(t, tc.reason, failed.Reason)
			}
			uploads, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectUploads)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				_, err := uploads.GetInfo(h.ctx, id+".tar.gz")
				return errors.Is(err, jetstream.ErrObjectNotFound)
			}, 10*time.Second, 20*time.Millisecond, "the upload is deleted once its outcome is published")

			// The same submission.received again, as a redelivery: another
			// event id, so that JetStream does not drop it as a duplicate.
			announce := tc.announce
			if announce == "" {
				sum := sha256.Sum256(archive)
				announce = hex.EncodeToString(sum[:])
			}
			ref := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: id + ".tar.gz", Size: int64(len(archive)), SHA256: announce, Files: 4}
			ack, err := bus.Emit(h.ctx, h.b, events.Source("test"), events.Submission.Received, id, receivedOf(id, ref), bus.CausedBy("again-"+id))
			require.NoError(t, err)
			require.False(t, ack.Duplicate)
			h.acked(ack.Sequence)
			var outcomes []string
			for _, e := range bustest.Stored(t, h.b, "arena.build.*."+id) {
				if e.Type() == string(events.BuildCompleted) || e.Type() == string(events.BuildFailed) {
					outcomes = append(outcomes, e.Type())
				}
			}
			require.Equal(t, []string{string(tc.want)}, outcomes, "one outcome, however often the input came")
			require.Empty(t, bustest.Stored(t, h.b, events.SubjectRootDLQ+".>"), "nothing dead-lettered")
		})
	}
}

// acked waits (up to 30 s, a bound, not a speed assertion) until the
// build's consumer has acked every message up to seq.
func (h *harness) acked(seq uint64) {
	h.t.Helper()
	c, err := h.b.JetStream().Consumer(h.ctx, events.StreamArena, build.Consumer.Name)
	require.NoError(h.t, err)
	require.Eventually(h.t, func() bool {
		info, err := c.Info(h.ctx)
		return err == nil && info.AckFloor.Stream >= seq && info.NumAckPending == 0
	}, 30*time.Second, 50*time.Millisecond, "the build acks the message")
}
