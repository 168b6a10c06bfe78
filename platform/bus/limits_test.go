package bus_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestProvisionSetsLimits: every stream, KV bucket and object store that
// Provision creates is bounded as its Limits say, with the retention
// written beside the code (the log and the queues refuse new messages,
// the DLQ drops its oldest, uploads expire), for the defaults and for
// limits an operator set; a second Provision with other limits changes
// them in place and keeps the messages, and CheckStream still takes the
// stream.
func TestProvisionSetsLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits bus.Limits
	}{
		{"defaults", bus.Limits{}},
		{"a 1 GiB volume with a day's uploads", bus.Limits{Volume: 1 << 30, UploadsMaxAge: 24 * time.Hour}},
		{"limits set one by one", bus.Limits{Volume: 2 << 30, ArenaMaxBytes: 100 << 20, JobsMaxBytes: 10 << 20, JobsMaxMsgs: 500,
			DLQMaxBytes: 20 << 20, KVMaxBytes: 8 << 20, UploadsMaxBytes: 600 << 20, ArtifactsMaxBytes: 1 << 30, UploadsMaxAge: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := bustest.Server(t, "")
			b, err := bus.New(bustest.Connect(t, s))
			require.NoError(t, err)
			ctx := tctx(t)
			require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{Limits: tc.limits}))
			want := tc.limits.WithDefaults()
			requireLimits(t, streamConfigs(t, b), want)

			// The operator changes the limits: they apply in place, the
			// log keeps its events, and a service still takes the stream.
			bustest.PublishSample(t, b, events.BuildStarted, "keep-me")
			other := want
			other.ArenaMaxBytes /= 2
			other.UploadsMaxBytes /= 2
			other.UploadsMaxAge *= 2
			require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{Limits: other}))
			requireLimits(t, streamConfigs(t, b), other.WithDefaults())
			require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), 1)
			require.NoError(t, bus.CheckStream(ctx, b.JetStream(), bus.Topology{}), "a service set for the default limits takes a stream whose limits the operator changed")
		})
	}
}

// requireLimits holds every stream of the arena to l.
func requireLimits(t *testing.T, have map[string]jetstream.StreamConfig, l bus.Limits) {
	t.Helper()
	require.Len(t, have, 16)
	for name, want := range map[string]struct {
		maxBytes, maxMsgs int64
		maxAge            time.Duration
		discard           jetstream.DiscardPolicy
	}{
		events.StreamArena:           {l.ArenaMaxBytes, -1, 0, jetstream.DiscardNew},
		events.StreamRunnerJobs:      {l.JobsMaxBytes, l.JobsMaxMsgs, 0, jetstream.DiscardNew},
		events.StreamDLQ:             {l.DLQMaxBytes, -1, 30 * 24 * time.Hour, jetstream.DiscardOld},
		"OBJ_" + bus.ObjectUploads:   {l.UploadsMaxBytes, -1, l.UploadsMaxAge, jetstream.DiscardNew},
		"OBJ_" + bus.ObjectArtifacts: {l.ArtifactsMaxBytes, -1, 0, jetstream.DiscardNew},
	} {
		c, ok := have[name]
		require.True(t, ok, name)
		require.Equal(t, want.maxBytes, c.MaxBytes, "%s's max bytes", name)
		require.Equal(t, want.maxMsgs, c.MaxMsgs, "%s's max messages", name)
		require.Equal(t, want.maxAge, c.MaxAge, "%s's max age", name)
		require.Equal(t, want.discard, c.Discard, "%s's discard policy", name)
	}
	kv := 0
	var total int64
	for name, c := range have {
		total += c.MaxBytes
		if len(name) > 3 && name[:3] == "KV_" {
			kv++
			require.Equal(t, l.KVMaxBytes, c.MaxBytes, "%s's max bytes", name)
			require.Equal(t, jetstream.DiscardNew, c.Discard, "%s refuses a put rather than drop a record", name)
		}
	}
	require.Equal(t, 11, kv)
	require.Equal(t, l.Total(), total, "Total is what the streams reserve")
	require.LessOrEqual(t, total, l.Volume, "the limits fit their volume")
}

// TestLimitsValidate: limits that reserve more than their volume are
// refused before anything is created, since JetStream would refuse them
// half-way.
func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits bus.Limits
		ok     bool
	}{
		{"defaults", bus.Limits{}, true},
		{"a small volume's shares", bus.Limits{Volume: 64 << 20}, true},
		{"artifacts larger than the volume", bus.Limits{Volume: 1 << 30, ArtifactsMaxBytes: 2 << 30}, false},
		{"uploads and artifacts together too large", bus.Limits{Volume: 10 << 30, UploadsMaxBytes: 5 << 30, ArtifactsMaxBytes: 5 << 30}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, bus.ErrLimits)
			s := bustest.Server(t, "")
			b, berr := bus.New(bustest.Connect(t, s))
			require.NoError(t, berr)
			require.ErrorIs(t, bus.Provision(tctx(t), b.JetStream(), bus.Topology{Limits: tc.limits}), bus.ErrLimits)
			require.ErrorIs(t, bus.CheckProvisioned(tctx(t), b.JetStream()), bus.ErrNotProvisioned, "nothing was created")
		})
	}
}

// TestFullStoreRefusesClearly: a put into an object store at its
// MaxBytes, and an event published to an ARENA stream at its MaxBytes,
// are refused with ErrStoreFull naming the store, and nothing already
// stored is dropped.
func TestFullStoreRefusesClearly(t *testing.T) {
	s := bustest.Server(t, "")
	b, err := bus.New(bustest.Connect(t, s))
	require.NoError(t, err)
	ctx := tctx(t)
	const room = 1 << 20
	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{Limits: bus.Limits{Volume: 64 << 20, UploadsMaxBytes: room, ArenaMaxBytes: 16 << 10}}))

	first := bytes.Repeat([]byte("a"), room/2)
	_, err = bus.PutObject(ctx, b.JetStream(), bus.ObjectUploads, jetstream.ObjectMeta{Name: "first"}, bytes.NewReader(first), bus.PutRetry{})
	require.NoError(t, err, "half the store fits")
	_, err = bus.PutObject(ctx, b.JetStream(), bus.ObjectUploads, jetstream.ObjectMeta{Name: "second"}, bytes.NewReader(bytes.Repeat([]byte("b"), room)), bus.PutRetry{})
	require.ErrorIs(t, err, bus.ErrStoreFull)
	require.ErrorContains(t, err, "object store "+bus.ObjectUploads+" is full")
	uploads, err := b.JetStream().ObjectStore(ctx, bus.ObjectUploads)
	require.NoError(t, err)
	kept, err := uploads.GetBytes(ctx, "first")
	require.NoError(t, err)
	require.Equal(t, first, kept, "the object stored before is kept whole")

	var refused error
	published := 0
	for i := range 200 {
		if _, refused = b.PublishNew(ctx, fmt.Sprintf("full-%d", i), events.BuildStarted, events.Source("test"), bustest.SampleSubject, bustest.Sample(events.BuildStarted)); refused != nil {
			break
		}
		published++
	}
	require.ErrorIs(t, refused, bus.ErrStoreFull, "the log refuses a fact once full")
	require.ErrorContains(t, refused, "stream "+events.StreamArena+" is full")
	require.Positive(t, published)
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), published, "and drops none it holds")
}
