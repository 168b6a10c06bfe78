package bus_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
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

// On a replicated bucket (R3 on a three-node cluster, as the README
// recommends) a compare-and-set that loses a race against one still in
// flight is refused with API error 10164, not 10071: Conflict must know it,
// or every CAS loop of the arena turns a lost race into a retry that ends
// dead-lettered. Many writers race for one revision until the server has
// answered 10164 at least once; every loser must be a Conflict.
func TestConflictReplicated(t *testing.T) {
	servers := bustest.Cluster(t, 3)
	nc, err := nats.Connect(bustest.ClusterURL(servers))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	b, err := bus.New(nc)
	require.NoError(t, err)
	ctx := tctx(t)
	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{Replicas: 3}))
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketRounds)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas)

	rev, err := kv.Create(ctx, "k", []byte("0"))
	require.NoError(t, err)
	_, err = kv.Create(ctx, "k", []byte("again"))
	require.True(t, bus.Conflict(err), "Create of an existing key: %v", err)

	seen := map[jetstream.ErrorCode]int{}
	for round := 0; round < 200 && seen[jetstream.JSErrCodeStreamWrongLastSequenceConstant] == 0; round++ {
		const writers = 8
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				_, err := kv.Update(ctx, "k", []byte(fmt.Sprint(round, w)), rev)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		won := 0
		for err := range errs {
			if err == nil {
				won++
				continue
			}
			require.True(t, bus.Conflict(err), "a lost race is a conflict: %v", err)
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				seen[apiErr.ErrorCode]++
			}
		}
		require.Equal(t, 1, won, "one writer wins each revision")
		e, err := kv.Get(ctx, "k")
		require.NoError(t, err)
		rev = e.Revision()
	}
	t.Logf("lost races by API error code: %v", seen)
	require.NotZero(t, seen[jetstream.JSErrCodeStreamWrongLastSequenceConstant], "the cluster never answered 10164; the test proved nothing")
}
