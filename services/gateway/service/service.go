// Package service wires the gateway: the record projector, which folds
// every pipeline event into the submission's record, and the HTTP API that
// serves the records. Both the gateway's own main and `arena up` use it.
package service

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/gateway/api"
	"github.com/lowbarena/lowbarena/services/gateway/projector"
	"github.com/lowbarena/lowbarena/services/runtime"
)

// Name is the gateway's service name.
const Name = "gateway"

// Options configure the gateway.
type Options struct {
	// HTTPAddr is where the API listens, host:port (port 0 picks one).
	HTTPAddr string
}

// Gateway is a started gateway: its actors and the address its API listens
// on.
type Gateway struct {
	Actors []runtime.Actor
	Addr   net.Addr
}

// New binds the API's listener and builds the gateway's actors. Binding
// here, before the actors run, makes a taken port an error at start and
// lets callers learn the address when they asked for port 0.
func New(ctx context.Context, rt *runtime.Runtime, o Options) (*Gateway, error) {
	kv, err := rt.Bus.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketSubmissions, err)
	}
	rounds, err := rt.Bus.JetStream().KeyValue(ctx, bus.BucketRounds)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketRounds, err)
	}
	ln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s: %w", o.HTTPAddr, err)
	}
	p := projector.New(rt.Bus, kv, rt.Store, rt.Log)
	return &Gateway{
		Actors: []runtime.Actor{
			{Name: "gateway-projector", Run: p.Run},
			runtime.HTTPActor("gateway-api", ln, api.New(kv, rounds), 10*time.Second),
		},
		Addr: ln.Addr(),
	}, nil
}
