//go:build embedded

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/access/enforce"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/contract"
	"github.com/lowbarena/lowbarena/services/efficiency"
	"github.com/lowbarena/lowbarena/services/gateway"
	"github.com/lowbarena/lowbarena/services/quality"
	"github.com/lowbarena/lowbarena/services/round"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/score"
)

// upOptions configure an arena on one machine.
type upOptions struct {
	data       string
	natsListen string
	httpAddr   string
	store      string
	otel       string
	logLevel   string
	// logFormat is text (the structured logs go to DATA/arena.log, the
	// terminal shows what a person follows) or json (the logs go to
	// standard error).
	logFormat string
	campaigns string
	// runners is how many GPU runners run in this process (0: none; the
	// efficiency stage then waits for runners elsewhere); pod names them.
	runners int
	pod     string
	ackWait time.Duration
	// refHosts are the repository hosts participants may name for
	// checkpoints by reference (build, contract and the runners).
	refHosts string
	// refTokensFile is a file of host=token lines (the tokens for private
	// repositories), refIdle the longest a repository may stay silent
	// mid-file: the build, contract and runner flags of the same names.
	refTokensFile string
	refIdle       time.Duration
	// tls are the embedded NATS server's TLS files (see natsauth.go).
	tls serverTLS
	// metricsAddr is where the process serves one /metrics for all its
	// services (and /healthz, /readyz); empty serves none.
	metricsAddr string
	// tracer, when set, takes every service's spans instead of the
	// provider --otel sets up (a test reads them back from memory).
	tracer trace.TracerProvider
	// limits bound the arena's streams, buckets and object stores; the
	// embedded server's JetStream store is their volume.
	limits bus.Limits
	// gc is how often the artifact collector runs (0: never), gcGrace
	// and gcKeepFailed its ages (see package gc).
	gc gcOptions
}

func (o *upOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.data, "data", app.EnvOr("LOWBARENA_DATA", ".data/arena"), "folder of the arena's state: NATS JetStream in DIR/nats, chDB in DIR/chdb")
	fs.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "where the embedded NATS listens for other processes (the CLI, external services)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "listen address of the gateway's HTTP API")
	fs.StringVar(&o.store, "store", "", "store URL (default chdb://DIR/chdb; or clickhouse://host:9000/db)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", app.EnvOr(app.EnvMetricsAddr, ""),
		"listen address of /metrics (Prometheus; every service of this process), /healthz and /readyz, e.g. 127.0.0.1:9464; empty serves none (env "+app.EnvMetricsAddr+")")
	fs.StringVar(&o.otel, "otel", app.EnvOr(app.EnvOTel, "none"), "telemetry exporter: none, stdout or otlp")
	fs.StringVar(&o.logLevel, "log-level", app.EnvOr(app.EnvLogLevel, "info"), "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", app.EnvOr(app.EnvLogFormat, "text"),
		"text: structured logs to DATA/"+LogFile+", the terminal shows submissions, runners, records, rounds and the leaderboard; json: the logs on standard error (env "+app.EnvLogFormat+")")
	fs.StringVar(&o.campaigns, "campaigns", app.EnvOr("LOWBARENA_CAMPAIGNS", ""), "folder of campaign folders pushed into the arena's store at start, as `arena campaign push` does (default DIR/campaigns; `arena example DIR` writes one)")
	fs.IntVar(&o.runners, "runners", 1, "GPU runners in this process, one per GPU (0: jobs wait for runners started elsewhere)")
	fs.StringVar(&o.pod, "pod", app.EnvOr("LOWBARENA_POD", "pod-0"), "name of this machine for its runners: BF16 references are measured once per pod")
	fs.DurationVar(&o.ackWait, "runner-ack-wait", 30*time.Second, "a runner job's ack deadline (a dead runner's job moves on after about this long)")
	fs.StringVar(&o.refHosts, "ref-hosts", app.EnvOr(app.EnvRefHosts, hub.DefaultHost),
		"repository hosts participants may name for checkpoints by reference, comma-separated (env "+app.EnvRefHosts+"; tokens: "+app.EnvRefTokens+" or "+app.EnvHFToken+")")
	fs.StringVar(&o.refTokensFile, "ref-tokens-file", os.Getenv(app.EnvRefTokensFile),
		"file of host=token lines: the bearer token sent to each repository host (env "+app.EnvRefTokensFile+"; also "+app.EnvRefTokens+" and "+app.EnvHFToken+")")
	fs.DurationVar(&o.refIdle, "ref-idle-timeout", hub.DefaultIdleTimeout, "longest a repository may stay silent while it sends a file")
	o.tls.register(fs)
	o.limits = app.LimitsFromEnv()
	app.RegisterLimitFlags(fs, &o.limits)
	o.gc.register(fs, true)
}

func cmdUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("up", stderr)
	var o upOptions
	o.register(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("up takes no arguments")
	}
	if problems := app.ValidateLimits(o.limits); len(problems) > 0 {
		return usageErr("up: %s", strings.Join(problems, "; "))
	}
	logOut, logWhere, closeLog, err := logDestination(o.data, o.logFormat, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	a, err := startArena(ctx, o, logOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "arena up: NATS %s · HTTP http://%s · store %s · data %s · campaigns %s\n", a.natsURL, a.httpAddr, a.storeEngine, a.data, strings.Join(a.campaigns, ","))
	fmt.Fprintf(stdout, "logs: %s · stages served: %s\n", logWhere, strings.Join(a.stages, ", "))
	if a.metricsAddr != "" {
		fmt.Fprintf(stdout, "metrics: http://%s%s · probes %s %s\n", a.metricsAddr, app.PathMetrics, app.PathHealthz, app.PathReadyz)
	}
	fmt.Fprintf(stdout, "in another terminal: arena watch · arena submit DIR · arena show ID --json · arena sql \"SHOW TABLES\" (Ctrl-C stops)\n")
	if o.gc.every > 0 {
		go collectEvery(ctx, a.dial, o.gc, a.log.With("component", "gc"))
	}
	go func() {
		f := newFollower(a.natsURL, a.stages, stdout)
		f.connect = a.dial
		if err := f.run(ctx); err != nil {
			a.log.Warn("the terminal's follower stopped", "err", err)
		}
	}()
	return a.wait()
}

// arenaProc is an arena running in this process.
type arenaProc struct {
	data, natsURL, httpAddr, storeEngine string
	// limits bound the streams, buckets and object stores it provisions.
	limits bus.Limits
	// metricsAddr is the metrics listener's address, "" when none.
	metricsAddr string
	metricsLn   net.Listener
	// stages lists the pipeline stages some running service handles.
	stages []string
	// campaigns lists the tasks the arena runs.
	campaigns []string

	store store.Store
	ns    *server.Server
	// creds are the NATS users' seeds in DIR/credentials; tls the
	// embedded server's TLS files.
	creds *access.Credentials
	tls   serverTLS
	rts   []*app.Runtime
	done  chan error
	lock  *os.File
	log   *slog.Logger
	prov  *observability.Providers
}

// components are the services `arena up` runs, in start order, each the
// very component its own binary runs (so their defaults cannot differ);
// the stages the arena serves come from the same list. The runners are
// added apart, one per GPU.
func components(listening func(net.Addr)) []app.Component {
	return []app.Component{
		gateway.Component(gateway.WithListening(listening)),
		build.Component(),
		contract.Component(),
		quality.Component(),
		efficiency.Component(),
		score.Component(),
		round.Component(),
	}
}

// settings are the component flags `arena up` owns: the folders under its
// data folder, its pod and HTTP address. A component without a flag of
// that name ignores it. The stages read their campaigns from the store,
// as in a cluster (no --campaigns folder), unpacked under
// DATA/campaigns-cache.
func (o upOptions) settings(data, component string, runnerIndex int) map[string]string {
	m := map[string]string{"campaigns": "", "campaigns-cache": filepath.Join(data, "campaigns-cache"),
		"pod": o.pod, "http": o.httpAddr, "ref-hosts": o.refHosts}
	// The build, contract and runners read repositories with these (their
	// own defaults, the same, apply when arena up's are unset).
	if o.refTokensFile != "" {
		m["ref-tokens-file"] = o.refTokensFile
	}
	if o.refIdle > 0 {
		m["ref-idle-timeout"] = o.refIdle.String()
	}
	switch component {
	case build.Name:
		m["work"] = filepath.Join(data, "build")
	case runner.Name:
		m["work"] = filepath.Join(data, "runner")
		m["ack-wait"] = o.ackWait.String()
		m["name"] = fmt.Sprintf("%s/runner-%d", o.pod, runnerIndex)
		if h := engineHelper(); h != "" {
			m["engine-helper"] = h
		}
	}
	return m
}

// engineHelper is the executable a sandboxed engine's sandbox starts
// first: this process links chDB, whose loader needs libchdb.so before
// main runs, which no sandbox holds, so it names the light arena binary
// beside it (make build and the tests lay them out so). "" when there is
// none: the runner then refuses patched engines with
// engine_sandbox_unavailable and says why.
func engineHelper() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	light := filepath.Join(filepath.Dir(self), "arena")
	if fi, err := os.Stat(light); err != nil || fi.IsDir() || light == self {
		return ""
	}
	return light
}

// startArena starts the embedded NATS server, then every component, each
// with its own runtime (its own NATS connection over the loopback
// listener, as if it ran in its own process) and sharing one store (chDB
// is one engine per process), and runs them until ctx is cancelled.
func startArena(ctx context.Context, o upOptions, logOut io.Writer) (_ *arenaProc, err error) { //nolint:gocyclo // the start-up in order: the server, then each component, each step undone if a later one fails
	data, err := filepath.Abs(o.data)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("up: create data folder: %w", err)
	}
	log, err := observability.NewLogger(logOut, "arena", o.logLevel, o.logFormat)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	a := &arenaProc{data: data, done: make(chan error, 1), log: log, limits: o.limits}
	defer func() {
		if err != nil {
			a.shutdown()
		}
	}()
	if a.lock, err = lockData(data); err != nil {
		return nil, err
	}
	exp, err := observability.ParseExporter(o.otel)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	// One meter provider for the whole process: every service's bus and
	// stages record into it (the global), so one /metrics serves them
	// all, each series labelled by its consumer or stage.
	ocfg := observability.Config{Service: "arena", Version: "dev", Exporter: exp}
	var metrics *app.Metrics
	if o.metricsAddr != "" {
		if a.metricsLn, err = app.ListenMetrics(o.metricsAddr); err != nil {
			return nil, usageErr("%v", err)
		}
		a.metricsAddr = a.metricsLn.Addr().String()
		if metrics, err = app.NewMetrics(); err != nil {
			return nil, fmt.Errorf("up: %w", err)
		}
		ocfg.Readers = append(ocfg.Readers, metrics.Reader())
	}
	if a.prov, err = observability.Setup(ctx, ocfg); err != nil {
		return nil, fmt.Errorf("up: telemetry: %w", err)
	}
	// Every client of the embedded NATS connects as a user of the
	// permission table, with its seed from DIR/credentials (made on the
	// first start, kept after): the services as themselves, the CLI and
	// this process's provisioning as the operator.
	if a.creds, err = access.LoadOrCreate(credentialsDir(data)); err != nil {
		return nil, fmt.Errorf("up: NATS credentials: %w", err)
	}
	a.tls = o.tls
	if a.ns, err = startNATS(filepath.Join(data, "nats"), o.natsListen, o.limits.WithDefaults().Volume, a.creds, o.tls, log.With("component", "nats")); err != nil {
		return nil, err
	}
	a.natsURL = a.ns.ClientURL()
	if err := a.provision(ctx); err != nil {
		return nil, err
	}
	storeURL := o.store
	if storeURL == "" {
		storeURL = "chdb://" + filepath.Join(data, "chdb")
	}
	if a.store, err = store.Open(ctx, storeURL); err != nil {
		return nil, fmt.Errorf("up: open store: %w", err)
	}
	a.storeEngine = a.store.Engine()
	campaignsDir := o.campaigns
	if campaignsDir == "" {
		campaignsDir = filepath.Join(data, "campaigns")
	}
	if a.campaigns, err = a.pushCampaigns(ctx, campaignsDir); err != nil {
		return nil, err
	}

	// start builds one component's runtime and actors with this arena's
	// settings over the component's own defaults.
	var actors []app.Actor
	start := func(c app.Component, runnerIndex int) error {
		cfg := app.DefaultConfig(c.Name)
		fs := c.FlagSet(&cfg)
		if err := app.Set(fs, o.settings(data, c.Name, runnerIndex)); err != nil {
			return err
		}
		cfg.NATSURL, cfg.OTel, cfg.LogLevel, cfg.Store = a.natsURL, o.otel, o.logLevel, ""
		cfg.NATSAuth, cfg.NATSTLS, cfg.Provision = a.auth(c.Name), a.clientTLS(), app.ProvisionNo
		// This process serves the metrics of all (above), not each
		// component ($LOWBARENA_METRICS_ADDR is arena up's, not theirs).
		cfg.MetricsAddr = ""
		opts := []app.Option{app.WithoutTelemetry()}
		if o.tracer != nil {
			opts = append(opts, app.WithTracerProvider(o.tracer))
		}
		if c.Store {
			cfg.Store = storeURL
			opts = append(opts, app.WithStore(a.store))
		}
		svcLog, err := observability.NewLogger(logOut, c.Name, o.logLevel, o.logFormat)
		if err != nil {
			return usageErr("%v", err)
		}
		rt, err := app.Start(ctx, cfg, append(opts, app.WithLogger(svcLog))...)
		if err != nil {
			return fmt.Errorf("up: start %s: %w", c.Name, err)
		}
		a.rts = append(a.rts, rt)
		acts, err := c.Build(ctx, rt)
		if err != nil {
			return fmt.Errorf("up: %s: %w", c.Name, err)
		}
		actors = append(actors, acts...)
		a.stages = append(a.stages, c.Stages...)
		return nil
	}
	for _, c := range components(func(addr net.Addr) { a.httpAddr = addr.String() }) {
		if err := start(c, 0); err != nil {
			return nil, err
		}
	}
	if o.runners > 0 {
		// Engines named by a bare command ("simengine ...") are looked up
		// beside this binary first: make build puts simengine there.
		if exe, err := os.Executable(); err == nil {
			os.Setenv("PATH", filepath.Dir(exe)+string(os.PathListSeparator)+os.Getenv("PATH"))
		}
		for i := range o.runners {
			if err := start(runner.Component(), i); err != nil {
				return nil, err
			}
		}
	}

	if metrics != nil {
		actors = append(actors, app.HTTPActor("metrics", a.metricsLn, metrics.Handler(a.ready), 5*time.Second))
	}
	go func() { a.done <- app.RunActors(ctx, log, actors...) }()
	log.Info("arena up", "nats", a.natsURL, "http", a.httpAddr, "store", a.storeEngine, "data", data, "services", len(a.rts))
	return a, nil
}

// ready says whether every service of the arena is ready (connected to
// the embedded NATS, the streams there): /readyz.
func (a *arenaProc) ready(ctx context.Context) error {
	for _, rt := range a.rts {
		if err := rt.Ready(ctx); err != nil {
			return fmt.Errorf("%s: %w", rt.Config.Service, err)
		}
	}
	return nil
}

// wait blocks until the services stop (ctx cancelled, or one failed), then
// shuts everything down in order: services drain, then NATS stops.
func (a *arenaProc) wait() error {
	err := <-a.done
	a.shutdown()
	return err
}

func (a *arenaProc) shutdown() {
	for i := len(a.rts) - 1; i >= 0; i-- {
		a.rts[i].Close()
	}
	a.rts = nil
	if a.metricsLn != nil {
		// Closed already when its actor ran; this closes one that never
		// served (a failed start).
		_ = a.metricsLn.Close()
		a.metricsLn = nil
	}
	if a.store != nil {
		if err := a.store.Close(); err != nil {
			a.log.Warn("store close", "err", err)
		}
		a.store = nil
	}
	if a.ns != nil {
		a.ns.Shutdown()
		a.ns.WaitForShutdown()
		a.ns = nil
	}
	if a.prov != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.prov.Shutdown(ctx)
		cancel()
		a.prov = nil
	}
	if a.lock != nil {
		_ = a.lock.Close()
		a.lock = nil
	}
	a.log.Info("arena stopped")
}

// startNATS runs nats-server with JetStream, its store in dir, listening on
// listen (host:port; port 0 picks a free one), with the permission table's
// users (their public keys from creds) and TLS when tls names a
// certificate. Its log goes to log; every violation it refuses is counted
// (lowbarena.nats.violations).
func startNATS(dir, listen string, volume int64, creds *access.Credentials, tls serverTLS, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, usageErr("--nats-listen %q: want host:port: %v", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, usageErr("--nats-listen %q: bad port", listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "arena",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		// The store is the limits' volume (--js-volume), so that the
		// limits Provision sets are exactly what the server grants.
		JetStreamMaxStore: volume,
		NoLog:             true,
		NoSigs:            true,
		MaxPayload:        2 << 20,
	}
	if err := enforce.Configure(opts, creds); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if err := tls.configure(opts); err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("up: nats-server: %w", err)
	}
	nlog, err := enforce.NewLog(log, creds, nil)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	nlog.Install(ns)
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("up: the embedded NATS did not start on %s (is the port taken? another `arena up`?)", listen)
	}
	return ns, nil
}

// ErrDataInUse says another arena runs on the same data folder.
var ErrDataInUse = errors.New("data folder in use")

// lockData takes an exclusive lock on DIR/arena.lock, so that two arenas
// never share one folder; the lock goes with the process.
func lockData(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "arena.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: another arena runs on %s", ErrDataInUse, dir)
	}
	return f, nil
}
