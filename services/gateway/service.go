// Package service wires the gateway: the record projector, which folds
// every pipeline event into the submission's record, the round projector,
// which folds round events into the gateway's own round views, the usage
// tally, which charges the runner's GPU-hours to participants, the
// participants' endpoints for the operator's CLI, and the HTTP API that
// serves the records and takes submissions. Both the gateway's own main
// and `arena up` use it, through Component.
package gateway

import (
	"context"

	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/services/gateway/api"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
	"github.com/lowbarena/lowbarena/services/gateway/projector"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
	"github.com/lowbarena/lowbarena/services/gateway/server"
	"github.com/lowbarena/lowbarena/services/gateway/timeline"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

// Name is the gateway's service name.
const Name = "gateway"

// Environment variables of the TLS files.
const (
	EnvTLSCert = "LOWBARENA_TLS_CERT"
	EnvTLSKey  = "LOWBARENA_TLS_KEY"
)

// Options configure the gateway.
type Options struct {
	// HTTPAddr is where the API listens, host:port (port 0 picks one).
	HTTPAddr string
	// TLSCert and TLSKey are PEM files to serve TLS with (both or none).
	TLSCert, TLSKey string
	// Quotas are every participant's defaults (a participant's own
	// overrides take precedence); every field must be positive.
	Quotas participant.Limits
	// MaxUploadBytes is the largest upload whatever the quota: keep it
	// the build stage's --max-upload-bytes.
	MaxUploadBytes int64
	// UploadsPerParticipant, Uploads and LiveStreams bound uploads and
	// live streams at once (see api.Options).
	UploadsPerParticipant, Uploads, LiveStreams int
	// HeaderTimeout bounds a request's headers and TLS handshake;
	// UploadIdle and UploadMinRate an upload's body (see api.Options).
	HeaderTimeout time.Duration
	UploadIdle    time.Duration
	UploadMinRate int64
	// UploadGrace is how long an upload may go before its rate counts
	// (zero: 10 s; tests shorten it).
	UploadGrace time.Duration
	// Spool is where uploads wait while they are checked.
	Spool string
	// Hash are the argon2id parameters of new tokens (zero: the
	// defaults; tests lower them).
	Hash participant.HashParams
	// Now is the quotas' clock (nil: time.Now).
	Now func() time.Time
	// MeterProvider gets the gateway's metrics (nil: the global one).
	MeterProvider metric.MeterProvider
}

// DefaultQuotas are a participant's quotas unless the operator says
// otherwise: 20 submissions a day, 2 GiB per upload, 10 GPU-hours a week.
var DefaultQuotas = participant.Limits{SubmissionsPerDay: 20, BytesPerSubmission: 2 << 30, GPUHoursPerWeek: 10}

// DefaultOptions are the gateway's defaults.
func DefaultOptions() Options {
	return Options{HTTPAddr: "127.0.0.1:8080", Quotas: DefaultQuotas, MaxUploadBytes: 2 << 30,
		UploadsPerParticipant: 2, Uploads: 8, LiveStreams: 256, HeaderTimeout: 10 * time.Second,
		UploadIdle: 30 * time.Second, UploadMinRate: 64 << 10, Spool: os.TempDir()}
}

// Gateway is a started gateway: its actors and the address its API listens
// on.
type Gateway struct {
	Actors []app.Actor
	Addr   net.Addr
	// TLS says the API speaks TLS.
	TLS bool
}

// New binds the API's listener and builds the gateway's actors. Binding
// here, before the actors run, makes a taken port or a bad TLS file an
// error at start and lets callers learn the address when they asked for
// port 0.
func New(ctx context.Context, rt *app.Runtime, o Options) (*Gateway, error) {
	if err := o.Quotas.Validate(true); err != nil {
		return nil, fmt.Errorf("%w: gateway quotas: %w", app.ErrConfig, err)
	}
	if st, err := os.Stat(o.Spool); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: gateway: --spool %s is not a folder", app.ErrConfig, o.Spool)
	}
	js := rt.Bus.JetStream()
	kv, err := js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketSubmissions, err)
	}
	views, err := js.KeyValue(ctx, bus.BucketRoundViews)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketRoundViews, err)
	}
	pkv, err := js.KeyValue(ctx, bus.BucketParticipants)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketParticipants, err)
	}
	ukv, err := js.KeyValue(ctx, bus.BucketUsage)
	if err != nil {
		return nil, fmt.Errorf("gateway: open bucket %s: %w", bus.BucketUsage, err)
	}
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	refusals, err := api.NewRefusals(mp)
	if err != nil {
		return nil, err
	}
	reg := participants.New(pkv, participants.Options{Hash: o.Hash, Now: o.Now})
	ledger := usage.New(ukv, o.Now)
	ln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s: %w", o.HTTPAddr, err)
	}
	tlsOn := o.TLSCert != "" || o.TLSKey != ""
	// The list's index, rebuilt from the bucket each start (actor
	// gateway-timeline); until it is through, the list reads the bucket.
	idx := timeline.New(kv)
	a, err := api.New(api.Options{Records: kv, Index: idx, Views: views, Registry: reg, Ledger: ledger, Bus: rt.Bus, NC: rt.NC, Store: rt.Store,
		Defaults: o.Quotas, MaxUploadBytes: o.MaxUploadBytes, UploadsPerParticipant: o.UploadsPerParticipant,
		Uploads: o.Uploads, LiveStreams: o.LiveStreams, UploadMinRate: o.UploadMinRate, UploadIdle: o.UploadIdle, UploadGrace: o.UploadGrace,
		Spool: o.Spool, TLS: tlsOn, Now: o.Now, Log: rt.Log, Refusals: refusals, Tracer: rt.Tracer})
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv, err := server.New(ln, a, server.Options{ReadHeaderTimeout: o.HeaderTimeout, TLSCert: o.TLSCert, TLSKey: o.TLSKey,
		Log: rt.Log, OnHeaderTimeout: func() { refusals.Add(context.Background(), reason.HeaderTimeout) }})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("%w: gateway: %w", app.ErrConfig, err)
	}
	p := projector.New(rt.Bus, kv, rt.Store, rt.Log)
	rp := rounds.New(rt.Bus, views, rt.Log)
	tally := usage.NewTally(rt.Bus, ledger, kv, rt.Log)
	c := &controls{reg: reg, ledger: ledger, defaults: o.Quotas, maxUpload: o.MaxUploadBytes, now: o.Now, log: rt.Log}
	return &Gateway{
		Actors: []app.Actor{
			{Name: "gateway-projector", Run: p.Run},
			{Name: "gateway-timeline", Run: idx.Run},
			{Name: "gateway-rounds", Run: rp.Run},
			{Name: "gateway-usage", Run: tally.Run},
			{Name: "gateway-participants", Run: func(ctx context.Context) error { return c.serve(ctx, rt.NC) }},
			{Name: "gateway-api", Run: srv.Run},
		},
		Addr: ln.Addr(),
		TLS:  srv.TLS(),
	}, nil
}

// Option adjusts the gateway's component.
type Option func(*settings)

type settings struct {
	listening func(net.Addr)
	adjust    func(*Options)
}

// WithListening has f called with the API's address once its listener is
// bound, before any actor runs (`arena up` and tests listen on port 0 and
// need the address).
func WithListening(f func(net.Addr)) Option { return func(s *settings) { s.listening = f } }

// WithOptions has f adjust the options after the flags are read (tests
// set a clock, cheaper hashes, a meter provider).
func WithOptions(f func(*Options)) Option { return func(s *settings) { s.adjust = f } }

// Component is the gateway as one component, for its own binary and
// `arena up` (which sets --http). It serves no pipeline stage; with a
// store it writes stage_results rows, without one none.
func Component(opts ...Option) app.Component {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	o := DefaultOptions()
	return app.Component{
		Name:  Name,
		Store: true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&o.HTTPAddr, "http", app.EnvOr("LOWBARENA_HTTP", o.HTTPAddr), "listen address of the HTTP API (env LOWBARENA_HTTP)")
			fs.StringVar(&o.TLSCert, "tls-cert", os.Getenv(EnvTLSCert), "PEM certificate (chain) to serve the API over TLS; read again when it changes (env "+EnvTLSCert+")")
			fs.StringVar(&o.TLSKey, "tls-key", os.Getenv(EnvTLSKey), "PEM private key of --tls-cert (env "+EnvTLSKey+")")
			fs.IntVar(&o.Quotas.SubmissionsPerDay, "quota-submissions-per-day", o.Quotas.SubmissionsPerDay, "a participant's submissions in any 24 hours, unless set for it")
			fs.Int64Var(&o.Quotas.BytesPerSubmission, "quota-bytes-per-submission", o.Quotas.BytesPerSubmission, "a participant's largest upload, unless set for it")
			fs.Float64Var(&o.Quotas.GPUHoursPerWeek, "quota-gpu-hours-per-week", o.Quotas.GPUHoursPerWeek, "the GPU-hours a participant's submissions may use in any 7 days, unless set for it")
			fs.Int64Var(&o.MaxUploadBytes, "max-upload-bytes", o.MaxUploadBytes, "the largest upload whatever the quota (keep it the build's --max-upload-bytes)")
			fs.IntVar(&o.UploadsPerParticipant, "uploads-per-participant", o.UploadsPerParticipant, "a participant's uploads at once")
			fs.IntVar(&o.Uploads, "max-uploads", o.Uploads, "uploads at once, all participants")
			fs.IntVar(&o.LiveStreams, "max-live", o.LiveStreams, "live streams (GET /v1/live) at once")
			fs.DurationVar(&o.HeaderTimeout, "header-timeout", o.HeaderTimeout, "longest a client may take to send a request's headers (and its TLS handshake)")
			fs.DurationVar(&o.UploadIdle, "upload-idle-timeout", o.UploadIdle, "longest an upload may stall")
			fs.Int64Var(&o.UploadMinRate, "upload-min-rate", o.UploadMinRate, "least average rate of an upload after its first 10 s, bytes a second")
			fs.StringVar(&o.Spool, "spool", o.Spool, "folder where uploads wait while they are checked")
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			if s.adjust != nil {
				s.adjust(&o)
			}
			g, err := New(ctx, rt, o)
			if err != nil {
				return nil, err
			}
			scheme := "http"
			if g.TLS {
				scheme = "https"
			}
			rt.Log.Info("HTTP API listening", "url", scheme+"://"+g.Addr.String())
			if s.listening != nil {
				s.listening(g.Addr)
			}
			return g.Actors, nil
		},
	}
}
