package gateway_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// BenchmarkSubmit: one submission of a 32 MiB bundle (incompressible
// weights), over HTTP through the gateway (token, spool with sha256,
// inspection, object store, event) beside what `arena submit` does over
// NATS with the same bytes (object store, event).
func BenchmarkSubmit(b *testing.B) {
	g := startGateway(b, nil, nil)
	token := g.add(b, "bench", participant.KindParticipant, participant.Limits{SubmissionsPerDay: 1 << 30})
	weights := make([]byte, 32<<20)
	_, err := rand.Read(weights)
	require.NoError(b, err)
	body := packed(b, "bench", "dev", map[string]string{"model.safetensors": string(weights)})
	b.Run("http", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			a := g.post(b, token, body)
			if a.status != http.StatusAccepted {
				b.Fatal(a.raw)
			}
		}
	})
	b.Run("nats", func(b *testing.B) {
		ctx := context.Background()
		store, err := g.b.JetStream().ObjectStore(ctx, bus.ObjectUploads)
		require.NoError(b, err)
		sum := sha(body)
		b.SetBytes(int64(len(body)))
		i := 0
		for b.Loop() {
			i++
			id := "nats" + string(rune('a'+i%26)) + sum[:8] + string(rune('a'+i/26%26))
			if _, err := store.PutBytes(ctx, id+".tar.gz", body); err != nil {
				b.Fatal(err)
			}
			_, err := bus.Emit(ctx, g.b, events.Source("cli"), events.Submission.Received, id, events.SubmissionReceivedData{
				SubmissionID: id, Participant: "bench", TaskID: "qwen3-tiny", Split: "dev", Track: "engine",
				Solution: events.DeclaredSolution{Checkpoint: "c", Method: "m"},
				Bundle:   events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: id + ".tar.gz", Size: int64(len(body)), SHA256: sum, Files: 3}},
				bus.WithID(events.DeriveID(id, "bench")))
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
