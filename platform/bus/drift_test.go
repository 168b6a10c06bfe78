package bus_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestConsumerDrift: a durable the server holds that differs from the
// code's in a setting that matters is either updated in place (filter
// subjects, ack wait, max deliver: the server edits them and keeps the
// durable's queue and position) or refused with consumer_config_mismatch
// (ack policy, deliver policy: the server cannot change them), naming the
// consumer, the field, the server's value and the code's, and left as it
// was. The drifted durables are made directly on an embedded nats-server,
// as a hand-edit would leave them.
func TestConsumerDrift(t *testing.T) {
	code := bus.ConsumerConfig{Name: "drifted", Subjects: []string{"arena.build.>"}, AckWait: 20 * time.Second, MaxDeliver: 4}
	for _, tc := range []struct {
		name  string
		drift func(c *jetstream.ConsumerConfig)
		// field is the setting that drifted; refused says it is refused.
		field   string
		refused bool
		server  string
		codeVal string
	}{
		{"the code's own durable", func(*jetstream.ConsumerConfig) {}, "", false, "", ""},
		{"filter subjects", func(c *jetstream.ConsumerConfig) { c.FilterSubject = "arena.>" }, "filter_subjects", false, "[arena.>]", "[arena.build.>]"},
		{"ack wait", func(c *jetstream.ConsumerConfig) { c.AckWait = time.Minute }, "ack_wait", false, "1m0s", "20s"},
		{"max deliver", func(c *jetstream.ConsumerConfig) { c.MaxDeliver = 9 }, "max_deliver", false, "9", "-1"},
		{"ack policy", func(c *jetstream.ConsumerConfig) { c.AckPolicy = jetstream.AckAllPolicy }, "ack_policy", true, "AckAll", "AckExplicit"},
		{"deliver policy", func(c *jetstream.ConsumerConfig) { c.DeliverPolicy = jetstream.DeliverNewPolicy }, "deliver_policy", true, "new", "all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := bustest.Bus(t)
			ctx := tctx(t)
			// The code's durable as the bus makes it, then drifted.
			_, err := b.EnsureConsumer(ctx, code)
			require.NoError(t, err)
			made := bustest.ConsumerInfo(t, b, events.StreamArena, "drifted").Config
			require.NoError(t, b.JetStream().DeleteConsumer(ctx, events.StreamArena, "drifted"))
			tc.drift(&made)
			_, err = b.JetStream().CreateConsumer(ctx, events.StreamArena, made)
			require.NoError(t, err)
			before := bustest.ConsumerInfo(t, b, events.StreamArena, "drifted").Config
			drift := bus.ConsumerDrift(before, mustConfig(t, b, code))
			if tc.field == "" {
				require.Empty(t, drift)
			} else {
				require.Equal(t, []bus.FieldDrift{{Field: tc.field, Server: tc.server, Code: tc.codeVal, InPlace: !tc.refused}}, drift)
			}

			_, err = b.EnsureConsumer(ctx, code)
			after := bustest.ConsumerInfo(t, b, events.StreamArena, "drifted").Config
			if !tc.refused {
				require.NoError(t, err)
				require.Empty(t, bus.ConsumerDrift(after, mustConfig(t, b, code)), "updated in place to the code's")
				return
			}
			require.ErrorIs(t, err, bus.ErrConsumerMismatch)
			var me *bus.ConsumerMismatchError
			require.True(t, errors.As(err, &me))
			require.Equal(t, "drifted", me.Consumer)
			require.Equal(t, events.StreamArena, me.Stream)
			require.Equal(t, []bus.FieldDrift{{Field: tc.field, Server: tc.server, Code: tc.codeVal}}, me.Fields)
			for _, s := range []string{string(reason.ConsumerConfigMismatch), "drifted on stream ARENA", tc.field + " is " + tc.server + " on the server, " + tc.codeVal + " in this service's code",
				"nats consumer rm ARENA drifted"} {
				require.ErrorContains(t, err, s)
			}
			require.Equal(t, before, after, "a refused durable is left as it was")
		})
	}
}

// mustConfig is the server-side configuration the bus gives cfg: the
// durable made from it on a scratch name, read back.
func mustConfig(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig) jetstream.ConsumerConfig {
	t.Helper()
	cfg.Name += "-scratch"
	_, err := b.EnsureConsumer(tctx(t), cfg)
	require.NoError(t, err)
	c := bustest.ConsumerInfo(t, b, events.StreamArena, cfg.Name).Config
	require.NoError(t, b.JetStream().DeleteConsumer(tctx(t), events.StreamArena, cfg.Name))
	return c
}
