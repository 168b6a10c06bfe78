// Package service wires the gateway: the record projector, which folds
// every pipeline event into the submission's record, the round projector,
// which folds round events into the gateway's own round views, and the
// HTTP API that serves both. Both the gateway's own main and `arena up`
// use it, through Component.
package service

import (
	"context"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/gateway/api"
	"github.com/lowbarena/lowbarena/services/gateway/projector"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
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
	js := rt.Bus.JetStream()
	kv, err := js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketSubmissions, err)
	}
	views, err := js.KeyValue(ctx, bus.BucketRoundViews)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketRoundViews, err)
	}
	ln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s: %w", o.HTTPAddr, err)
	}
	p := projector.New(rt.Bus, kv, rt.Store, rt.Log)
	rp := rounds.New(rt.Bus, views, rt.Log)
	return &Gateway{
		Actors: []runtime.Actor{
			{Name: "gateway-projector", Run: p.Run},
			{Name: "gateway-rounds", Run: rp.Run},
			runtime.HTTPActor("gateway-api", ln, api.New(kv, views), 10*time.Second),
		},
		Addr: ln.Addr(),
	}, nil
}

// Option adjusts the gateway's component.
type Option func(*settings)

type settings struct{ listening func(net.Addr) }

// WithListening has f called with the API's address once its listener is
// bound, before any actor runs (`arena up` and tests listen on port 0 and
// need the address).
func WithListening(f func(net.Addr)) Option { return func(s *settings) { s.listening = f } }

// Component is the gateway as one component, for its own binary and
// `arena up` (which sets --http). It serves no pipeline stage; with a
// store it writes stage_results rows, without one none.
func Component(opts ...Option) runtime.Component {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	var httpAddr *string
	return runtime.Component{
		Name:  Name,
		Store: true,
		Flags: func(fs *flag.FlagSet) {
			httpAddr = fs.String("http", runtime.EnvOr("LOWBARENA_HTTP", "127.0.0.1:8080"), "listen address of the HTTP API (env LOWBARENA_HTTP)")
		},
		Build: func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
			g, err := New(ctx, rt, Options{HTTPAddr: *httpAddr})
			if err != nil {
				return nil, err
			}
			rt.Log.Info("HTTP API listening", "addr", g.Addr.String())
			if s.listening != nil {
				s.listening(g.Addr)
			}
			return g.Actors, nil
		},
	}
}
