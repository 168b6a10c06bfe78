package ctl_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

type echoReq struct {
	Name string `json:"name"`
}

type echoRep struct {
	Hello string `json:"hello"`
}

// An endpoint answers in JSON, a refusal travels in micro's error headers
// with its code and sentence, and the service is visible to $SRV.PING.
func TestEndpointAndCall(t *testing.T) {
	nc := bustest.Connect(t, bustest.Server(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := micro.AddService(nc, micro.Config{Name: "echo", Version: "1.0.0"})
	require.NoError(t, err)
	defer func() { _ = svc.Stop() }()
	require.NoError(t, ctl.Endpoint(ctx, svc, "hello", "test.hello", time.Second, func(_ context.Context, r echoReq) (echoRep, error) {
		switch r.Name {
		case "":
			return echoRep{}, ctl.Refuse(ctl.CodeBadRequest, "a name is required")
		case "boom":
			return echoRep{}, errors.New("the store does not answer")
		case "write":
			return echoRep{}, ctl.RefuseWith(ctl.CodeBadRequest, "sql_not_read_only", "INSERT is not read-only")
		}
		return echoRep{Hello: r.Name}, nil
	}))

	rep, err := ctl.Call[echoRep](ctx, nc, "test.hello", echoReq{Name: "arena"})
	require.NoError(t, err)
	require.Equal(t, "arena", rep.Hello)

	_, err = ctl.Call[echoRep](ctx, nc, "test.hello", echoReq{})
	var e *ctl.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, ctl.CodeBadRequest, e.Code)
	require.Equal(t, "a name is required", e.Message)
	require.Empty(t, e.Reason)

	_, err = ctl.Call[echoRep](ctx, nc, "test.hello", echoReq{Name: "write"})
	require.ErrorAs(t, err, &e)
	require.Equal(t, ctl.CodeBadRequest, e.Code)
	require.Equal(t, reason.Code("sql_not_read_only"), e.Reason, "the stable reason travels beside micro's code")
	require.Equal(t, "INSERT is not read-only", e.Message)

	_, err = ctl.Call[echoRep](ctx, nc, "test.hello", echoReq{Name: "boom"})
	require.ErrorAs(t, err, &e)
	require.Equal(t, ctl.CodeInternal, e.Code)
	require.Contains(t, e.Message, "store does not answer")

	// A body that is not the request type is refused, not guessed.
	msg, err := nc.RequestWithContext(ctx, "test.hello", []byte("{not json"))
	require.NoError(t, err)
	require.Equal(t, ctl.CodeBadRequest, msg.Header.Get(micro.ErrorCodeHeader))

	_, err = ctl.Call[echoRep](ctx, nc, "test.nobody", echoReq{Name: "x"})
	require.ErrorIs(t, err, ctl.ErrNoService)

	ping, err := nc.RequestWithContext(ctx, "$SRV.PING.echo", nil)
	require.NoError(t, err)
	var p micro.Ping
	require.NoError(t, json.Unmarshal(ping.Data, &p))
	require.Equal(t, "echo", p.Name)
}

// TestCallWaiting: a call to a service that starts a moment later is
// answered; one to a service that never comes gives ErrNoService once its
// wait is over; a refusal is not asked again.
func TestCallWaiting(t *testing.T) {
	srv := bustest.Server(t, "")
	nc := bustest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var calls atomic.Int64
	start := func() {
		svc, err := micro.AddService(bustest.Connect(t, srv), micro.Config{Name: "late", Version: "1.0.0"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop() })
		require.NoError(t, ctl.Endpoint(ctx, svc, "hello", "test.late", time.Second, func(_ context.Context, r echoReq) (echoRep, error) {
			calls.Add(1)
			if r.Name == "" {
				return echoRep{}, ctl.Refuse(ctl.CodeBadRequest, "a name is required")
			}
			return echoRep{Hello: r.Name}, nil
		}))
	}

	_, err := ctl.CallWaiting[echoRep](ctx, nc, "test.late", echoReq{Name: "early"}, 0)
	require.ErrorIs(t, err, ctl.ErrNoService, "without a wait it is Call")
	_, err = ctl.CallWaiting[echoRep](ctx, nc, "test.late", echoReq{Name: "early"}, 300*time.Millisecond)
	require.ErrorIs(t, err, ctl.ErrNoService, "nobody came within the wait")

	started := make(chan struct{})
	go func() {
		time.Sleep(700 * time.Millisecond)
		start()
		close(started)
	}()
	rep, err := ctl.CallWaiting[echoRep](ctx, nc, "test.late", echoReq{Name: "arena"}, 15*time.Second)
	require.NoError(t, err)
	require.Equal(t, "arena", rep.Hello)
	<-started
	require.Equal(t, int64(1), calls.Load(), "answered once")

	_, err = ctl.CallWaiting[echoRep](ctx, nc, "test.late", echoReq{}, 15*time.Second)
	var e *ctl.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, int64(2), calls.Load(), "a refusal is not asked again")
}
