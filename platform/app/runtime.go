package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
)

// Runtime holds what a service's actors use: the logger, the NATS
// connection and its bus (with the arena's streams provisioned), and the
// store when the configuration names one.
type Runtime struct {
	Config Config
	Log    *slog.Logger
	NC     *nats.Conn
	Bus    *bus.Bus
	// Store is nil when Config.Store is empty.
	Store store.Store
	// Tracer is the tracer provider of the service's spans: the bus's
	// publish and process spans and the gateway's server spans. It is
	// the otel global unless WithTracerProvider named one.
	Tracer trace.TracerProvider

	providers *observability.Providers
	// metrics and metricsLn serve /metrics when Config.MetricsAddr is
	// set (MetricsActor); the listener is bound in Start, so that a
	// port in use stops the service before it connects.
	metrics   *Metrics
	metricsLn net.Listener
	closeOnce sync.Once
	// ownStore says Close closes Store: false for a store another
	// runtime shares with this one (WithStore).
	ownStore bool
	// readyMu guards readyChecks, the component's own readiness checks
	// (AddReadyCheck).
	readyMu     sync.Mutex
	readyChecks []func(context.Context) error
}

// Option adjusts Start.
type Option func(*startOptions)

type startOptions struct {
	logOut    io.Writer
	telemetry bool
	log       *slog.Logger
	store     store.Store
	tracer    trace.TracerProvider
}

// WithTracerProvider makes tp the provider of the runtime's spans instead
// of the otel global: a test reads one submission's spans back from an
// in-memory recorder this way, through `arena up`'s own wiring.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *startOptions) { o.tracer = tp }
}

// WithStore uses st as the runtime's store instead of opening the
// configuration's; Close leaves it open. `arena up` shares one chDB (one
// engine per process) among its services this way.
func WithStore(st store.Store) Option { return func(o *startOptions) { o.store = st } }

// WithLogOutput sends the log to w instead of standard error.
func WithLogOutput(w io.Writer) Option { return func(o *startOptions) { o.logOut = w } }

// WithLogger uses l as it is instead of building a logger from the
// configuration; it should already name the service.
func WithLogger(l *slog.Logger) Option { return func(o *startOptions) { o.log = l } }

// WithoutTelemetry leaves the OpenTelemetry globals alone: for a process
// that runs several services and sets telemetry up once itself.
func WithoutTelemetry() Option { return func(o *startOptions) { o.telemetry = false } }

// Start validates cfg, sets up telemetry and logging, connects to NATS,
// provisions the arena's streams, buckets and object stores, and opens the
// store (applying its migrations). On error nothing stays open.
func Start(ctx context.Context, cfg Config, opts ...Option) (_ *Runtime, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := startOptions{logOut: os.Stderr, telemetry: true}
	for _, opt := range opts {
		opt(&o)
	}
	rt := &Runtime{Config: cfg}
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	if o.log != nil {
		rt.Log = o.log
	} else if rt.Log, err = observability.NewLogger(o.logOut, cfg.Service, cfg.LogLevel, cfg.LogFormat); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.MetricsAddr != "" {
		// The metrics are this runtime's meter provider's: one that
		// leaves telemetry to its process (`arena up`) serves them there.
		if !o.telemetry {
			return nil, fmt.Errorf("%w: metrics address %s given to a runtime without its own telemetry: the process that sets telemetry up serves /metrics (arena up --metrics-addr)", ErrConfig, cfg.MetricsAddr)
		}
		if rt.metricsLn, err = ListenMetrics(cfg.MetricsAddr); err != nil {
			return nil, err
		}
		if rt.metrics, err = NewMetrics(); err != nil {
			return nil, err
		}
	}
	if o.telemetry {
		exp, _ := observability.ParseExporter(cfg.OTel) // validated above
		ocfg := observability.Config{Service: cfg.Service, Version: cfg.Version, Exporter: exp}
		if rt.metrics != nil {
			ocfg.Readers = append(ocfg.Readers, rt.metrics.Reader())
		}
		if rt.providers, err = observability.Setup(ctx, ocfg); err != nil {
			return nil, fmt.Errorf("runtime: telemetry: %w", err)
		}
	}
	if rt.NC, err = ConnectNATS(cfg.NATSClient(), rt.Log); err != nil {
		return nil, err
	}
	rt.Tracer = o.tracer
	if rt.Tracer == nil {
		// Read after Setup: the provider it just installed.
		rt.Tracer = otel.GetTracerProvider()
	}
	if rt.Bus, err = bus.New(rt.NC, bus.WithLogger(rt.Log), bus.WithTracerProvider(rt.Tracer)); err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	if cfg.provisions() {
		err = waitForNATS(ctx, rt.Log, "provision", func(ctx context.Context) error { return provision(ctx, rt.Bus, cfg.Topology()) })
	} else {
		err = waitForNATS(ctx, rt.Log, "check the arena's streams", func(ctx context.Context) error { return checkProvisioned(ctx, rt.Bus, cfg.Replicas) })
	}
	if err != nil {
		return nil, err
	}
	if o.store != nil {
		rt.Store = o.store
	} else if cfg.Store != "" {
		rt.ownStore = true
		// A server that is down for a while (a restart, a failover) is
		// waited for: at the start (up to RetryOptions' MaxWait, instead
		// of exiting into a crash loop), and inside each call, so that
		// the service's handlers keep their messages instead of
		// spending their deliveries.
		if rt.Store, err = store.OpenWaiting(ctx, cfg.Store, store.RetryOptions{Log: rt.Log}); err != nil {
			return nil, fmt.Errorf("runtime: open store: %w", err)
		}
		rt.Log.Info("store open", "engine", rt.Store.Engine())
	}
	return rt, nil
}

// NATSOutage bounds how long a service waits, at its start, for a NATS
// that does not answer its JetStream requests: a cluster electing its
// streams' leaders after a node died. TryTimeout bounds one try.
var (
	NATSOutage = 2 * time.Minute
	TryTimeout = 30 * time.Second
	// natsPause is the first pause between tries (tests lengthen it).
	natsPause = time.Second
)

// waitForNATS runs try, bounded by TryTimeout, and again while its error
// says that JetStream answers nobody for the moment (bus.Interrupted), up
// to NATSOutage from the first such error, with pauses of 1 s doubling to
// 8 s. Any other error, and ctx ending, return at once. Without this, a
// service started while a node of the cluster was down exited (`look up
// stream ARENA: context deadline exceeded`) and its orchestrator started
// it again and again: three of a chaos run's restarts.
func waitForNATS(ctx context.Context, log *slog.Logger, what string, try func(ctx context.Context) error) error {
	var giveUp time.Time
	for pause := natsPause; ; pause = min(2*pause, max(8*time.Second, natsPause)) {
		tctx, cancel := context.WithTimeout(ctx, TryTimeout)
		err := try(tctx)
		cancel()
		if err == nil || ctx.Err() != nil || !bus.Interrupted(err) {
			return err
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(NATSOutage)
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("%w (NATS answered nothing for %s)", err, NATSOutage)
		}
		if log != nil {
			log.Warn("NATS does not answer yet: trying again", "what", what, "err", err, "pause", pause)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// Connect opens an anonymous NATS connection named name (see
// ConnectNATS, which takes credentials and TLS files).
func Connect(urls, name string, log *slog.Logger) (*nats.Conn, error) {
	return ConnectNATS(NATSClient{URLs: urls, Name: name}, log)
}

// ErrNotProvisioned says the arena's streams are missing and this
// service is not the one to create them.
var ErrNotProvisioned = errors.New("the arena's streams are not provisioned")

// provision creates or updates the arena's streams, buckets and object
// stores (idempotent). A user the server does not allow to is told so at
// once (code permission_denied).
func provision(ctx context.Context, b *bus.Bus, t bus.Topology) error {
	err := b.Guard(ctx, func(ctx context.Context) error {
		return bus.Provision(ctx, b.JetStream(), t)
	}, "$JS.API.STREAM.>")
	if errors.Is(err, bus.ErrDenied) {
		return fmt.Errorf("runtime: provision the arena's streams: %w (provision as the operator: `arena up`, or any service binary's `provision` command with the operator's credentials; or start with --provision no)", err)
	}
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	return nil
}

// checkProvisioned requires the ARENA stream to exist, as this service
// is set for it (replicas): a service that connects as a user of the
// permission table does not create it, and one that finds another
// stream (the wrong cluster, another replica count) refuses to start
// rather than work on it or re-create it (stream_config_mismatch).
func checkProvisioned(ctx context.Context, b *bus.Bus, replicas int) error {
	err := b.Guard(ctx, func(ctx context.Context) error {
		return bus.CheckStream(ctx, b.JetStream(), bus.Topology{Replicas: replicas})
	}, "$JS.API.STREAM.INFO.>")
	if errors.Is(err, bus.ErrNotProvisioned) {
		return fmt.Errorf("%w: start the arena (`arena up`) or provision it as the operator (any service binary's `provision` command with the operator's credentials) first", ErrNotProvisioned)
	}
	if errors.Is(err, bus.ErrStreamMismatch) {
		return fmt.Errorf("runtime: %w (is %s the arena's cluster? this service is set for %d replicas, %s; the operator's `provision` sets the streams, and nothing re-creates them)",
			err, EnvNATSURL, replicas, EnvReplicas)
	}
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	return nil
}

// Close drains the NATS connection (pending publishes are flushed and
// subscriptions finish the messages in hand), closes the store and flushes
// telemetry. It is safe to call more than once.
func (rt *Runtime) Close() {
	rt.closeOnce.Do(func() {
		timeout := rt.Config.ShutdownTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		if rt.metricsLn != nil {
			// MetricsActor's shutdown has closed it already when it ran;
			// this closes one that never served (a failed start).
			_ = rt.metricsLn.Close()
		}
		if rt.NC != nil {
			if err := drain(rt.NC, timeout); err != nil && rt.Log != nil {
				rt.Log.Warn("NATS drain", "err", err)
			}
		}
		if rt.Store != nil && rt.ownStore {
			if err := rt.Store.Close(); err != nil && rt.Log != nil {
				rt.Log.Warn("store close", "err", err)
			}
		}
		if rt.providers != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := rt.providers.Shutdown(ctx); err != nil && rt.Log != nil {
				rt.Log.Warn("telemetry shutdown", "err", err)
			}
		}
	})
}

func drain(nc *nats.Conn, timeout time.Duration) error {
	if nc.IsClosed() {
		return nil
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return err
	}
	select {
	case <-closed:
		return nil
	case <-time.After(timeout):
		nc.Close()
		return fmt.Errorf("drain did not finish in %s", timeout)
	}
}

// Actor is one long-running part of a service: a consumer loop, an HTTP
// server. Run blocks until ctx is cancelled (returning nil, after finishing
// the work in hand) or until it fails.
type Actor struct {
	Name string
	Run  func(ctx context.Context) error
}

// RunActors runs every actor under one context. The first actor to fail
// cancels the others; RunActors returns when all have returned, with the
// first failure (nil when they stopped because ctx was cancelled).
func RunActors(ctx context.Context, log *slog.Logger, actors ...Actor) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, a := range actors {
		wg.Go(func() {
			err := a.Run(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				err = fmt.Errorf("%s: %w", a.Name, err)
				once.Do(func() { first = err })
				cancel(err)
				return
			}
			if ctx.Err() == nil {
				// An actor that stops on its own while the others run is
				// a failure too: the service would be half alive.
				err := fmt.Errorf("%s stopped unexpectedly", a.Name)
				once.Do(func() { first = err })
				cancel(err)
			}
		})
	}
	wg.Wait()
	if first != nil && log != nil {
		log.Error("service stopping", "err", first)
	}
	return first
}

// Build returns the actors of a service once its runtime is up.
type Build func(ctx context.Context, rt *Runtime) ([]Actor, error)

// Main is the whole life of a service process: parse args into fs (on which
// cfg.RegisterFlags was called), validate, start the runtime, build and run
// the actors until SIGINT or SIGTERM, then drain and close. It exits the
// process: 0 after a clean stop, 2 for a configuration error, 1 otherwise.
//
// With "provision" as the first argument the process only creates or
// updates the arena's streams, buckets and object stores and exits: run
// it with the operator's credentials before services that connect as
// their own users (docker-compose.yml does).
func Main(cfg *Config, fs *flag.FlagSet, args []string, build Build) {
	os.Exit(run(cfg, fs, args, build))
}

// CommandProvision is the first argument that makes Main provision and
// exit.
const CommandProvision = "provision"

func run(cfg *Config, fs *flag.FlagSet, args []string, build Build) int {
	provisionOnly := len(args) > 0 && args[0] == CommandProvision
	if provisionOnly {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments: %s\n", cfg.Service, strings.Join(fs.Args(), " "))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if provisionOnly {
		c := *cfg
		c.Provision, c.Store, c.MetricsAddr = ProvisionYes, "", ""
		rt, err := Start(ctx, c, WithoutTelemetry())
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s provision: %v\n", cfg.Service, err)
			if errors.Is(err, ErrConfig) {
				return 2
			}
			return 1
		}
		l := c.Limits.WithDefaults()
		rt.Log.Info("provisioned the arena's streams, buckets and object stores", "nats", rt.NC.ConnectedUrlRedacted(), "replicas", c.Replicas,
			"volume", FormatBytes(l.Volume), "reserved", FormatBytes(l.Total()), "uploads_max_bytes", FormatBytes(l.UploadsMaxBytes),
			"uploads_max_age", l.UploadsMaxAge, "artifacts_max_bytes", FormatBytes(l.ArtifactsMaxBytes), "arena_max_bytes", FormatBytes(l.ArenaMaxBytes))
		rt.Close()
		return 0
	}
	rt, err := Start(ctx, *cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cfg.Service, err)
		if errors.Is(err, ErrConfig) {
			return 2
		}
		return 1
	}
	defer rt.Close()
	// A build that NATS interrupts (an object store or bucket opened while
	// its stream elects a leader) builds again: every Build leaves nothing
	// behind that a second call would collide with (the gateway closes its
	// listener on a failure).
	var actors []Actor
	err = waitForNATS(ctx, rt.Log, "build "+cfg.Service, func(context.Context) error {
		// ctx, not the try's: a build's actors keep what it is given.
		var err error
		actors, err = build(ctx, rt)
		return err
	})
	if err != nil {
		rt.Log.Error("start", "err", err)
		return 1
	}
	if a, ok := rt.MetricsActor(); ok {
		actors = append(actors, a)
		rt.Log.Info("serving metrics", "addr", rt.MetricsAddr().String(), "paths", PathMetrics+" "+PathHealthz+" "+PathReadyz)
	}
	rt.Log.Info("started", "nats", rt.NC.ConnectedUrlRedacted(), "actors", len(actors))
	if err := RunActors(ctx, rt.Log, actors...); err != nil {
		return 1
	}
	rt.Log.Info("stopped")
	return 0
}
