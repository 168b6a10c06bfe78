package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

func TestParseDenied(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want *bus.DeniedError
	}{
		{"publish", fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "arena.score.completed.s1"`),
			&bus.DeniedError{Op: "publish", Subject: "arena.score.completed.s1"}},
		{"subscribe with a queue", fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "lowbarena.ctl.rescore" using queue "q"`),
			&bus.DeniedError{Op: "subscribe", Subject: "lowbarena.ctl.rescore"}},
		{"a JetStream API subject", fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.ARENA.spy.arena.>"`),
			&bus.DeniedError{Op: "publish", Subject: "$JS.API.CONSUMER.CREATE.ARENA.spy.arena.>"}},
		{"another error", nats.ErrSlowConsumer, nil},
		{"nothing", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bus.ParseDenied(tt.err)
			require.Equal(t, tt.want, got)
			if got != nil {
				require.ErrorIs(t, got, bus.ErrDenied)
				require.Equal(t, reason.PermissionDenied, got.Code())
				require.Contains(t, got.Error(), tt.want.Subject)
			}
		})
	}
}

// restricted starts a server with an admin (everything) and a user who
// may use the JetStream API and its inboxes, and publish to
// arena.build.started.* only, and returns a bus of each.
func restricted(t *testing.T, mp *sdkmetric.MeterProvider) (admin, user *bus.Bus) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "user", Password: "u", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>", "arena.build.started.*", "$JS.API.CONSUMER.CREATE.ARENA.mine.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
			}},
		}})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	conn := func(user, pw string) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, pw))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	admin, err = bus.New(conn("admin", "a"))
	require.NoError(t, err)
	require.NoError(t, bus.Provision(tctx(t), admin.JetStream(), bus.Topology{}))
	user, err = bus.New(conn("user", "u"), bus.WithMeterProvider(mp))
	require.NoError(t, err)
	return admin, user
}

func TestDeniedIsAnErrorNotAWait(t *testing.T) {
	metrics := sdkmetric.NewManualReader()
	admin, user := restricted(t, sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics)))
	// A deadline far past any refusal: an operation that waited it out
	// would fail as context.DeadlineExceeded, not as ErrDenied.
	ctx := tctx(t)

	_, err := user.PublishNew(ctx, "e1", events.BuildCompleted, events.Source("test"), bustest.SampleSubject, bustest.Sample(events.BuildCompleted))
	require.ErrorIs(t, err, bus.ErrDenied)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	var de *bus.DeniedError
	require.ErrorAs(t, err, &de)
	require.Equal(t, &bus.DeniedError{Op: "publish", Subject: "arena.build.completed." + bustest.SampleSubject}, de)

	// Its own subject still publishes, on the same connection.
	_, err = user.PublishNew(ctx, "e2", events.BuildStarted, events.Source("test"), bustest.SampleSubject, bustest.Sample(events.BuildStarted))
	require.NoError(t, err)

	_, err = user.EnsureConsumer(ctx, bus.ConsumerConfig{Name: "spy", Subjects: []string{events.SubjectRootArena + ".>"}})
	require.ErrorIs(t, err, bus.ErrDenied)
	require.ErrorAs(t, err, &de)
	require.Equal(t, "$JS.API.CONSUMER.CREATE.ARENA.spy.arena.>", de.Subject)

	// A refusal of another subject leaves a guarded operation alone.
	err = user.Guard(ctx, func(ctx context.Context) error {
		require.NoError(t, user.Conn().Publish("arena.score.completed.x", nil))
		require.NoError(t, user.Conn().Flush())
		_, err := user.JetStream().Stream(ctx, events.StreamArena)
		return err
	}, "$JS.API.STREAM.INFO.ARENA")
	require.NoError(t, err)
	// And an operation's own error passes through.
	boom := errors.New("boom")
	require.ErrorIs(t, user.Guard(ctx, func(context.Context) error { return boom }, ">"), boom)

	require.Eventually(t, func() bool { return counterBy(t, metrics, "lowbarena.nats.denied", "op")["publish"] == 3 },
		wait, 10*time.Millisecond, "three refusals counted")
	// Nothing refused was stored: the one build.started only.
	msgs := bustest.StreamMsgs(t, admin, events.StreamArena)
	require.Len(t, msgs, 1)
	require.Equal(t, "arena.build.started."+bustest.SampleSubject, msgs[0].Subject)
}
