package bus_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
)

func TestKey(t *testing.T) {
	require.Equal(t, "quality.qwen3-tiny.lowb-gen_1_dev", bus.Key("quality", "qwen3-tiny", "lowb-gen@1/dev"))
	require.Equal(t, "pod_a.b_c", bus.Key("pod a", "b.c"))
}

// Conflict is what a lost compare-and-set race returns, on a real bucket.
func TestConflict(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := tctx(t)
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketRounds)
	require.NoError(t, err)
	rev, err := kv.Create(ctx, "k", []byte("1"))
	require.NoError(t, err)
	_, err = kv.Create(ctx, "k", []byte("2"))
	require.True(t, bus.Conflict(err), "%v", err)
	_, err = kv.Update(ctx, "k", []byte("3"), rev+5)
	require.True(t, bus.Conflict(err), "%v", err)
	_, err = kv.Update(ctx, "k", []byte("4"), rev)
	require.NoError(t, err)
	require.False(t, bus.Conflict(jetstream.ErrKeyNotFound))
}
