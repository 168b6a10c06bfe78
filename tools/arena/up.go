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

	"github.com/lowbarena/lowbarena/observability"
	build "github.com/lowbarena/lowbarena/services/build/service"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	contract "github.com/lowbarena/lowbarena/services/contract/service"
	efficiency "github.com/lowbarena/lowbarena/services/efficiency/service"
	gateway "github.com/lowbarena/lowbarena/services/gateway/service"
	quality "github.com/lowbarena/lowbarena/services/quality/service"
	round "github.com/lowbarena/lowbarena/services/round/service"
	"github.com/lowbarena/lowbarena/services/runner/job"
	runner "github.com/lowbarena/lowbarena/services/runner/service"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
	"github.com/lowbarena/lowbarena/services/runtime"
	score "github.com/lowbarena/lowbarena/services/score/service"
	"github.com/lowbarena/lowbarena/services/store"
	_ "github.com/lowbarena/lowbarena/services/store/chdb"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

// upOptions configure an arena on one machine.
type upOptions struct {
	data       string
	natsListen string
	httpAddr   string
	store      string
	otel       string
	logLevel   string
	campaigns  string
	// runners is how many GPU runners run in this process (0: none; the
	// efficiency stage then waits for runners elsewhere); pod names them.
	runners int
	pod     string
	ackWait time.Duration
}

func (o *upOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.data, "data", runtime.EnvOr("LOWBARENA_DATA", ".data/arena"), "folder of the arena's state: NATS JetStream in DIR/nats, chDB in DIR/chdb")
	fs.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "where the embedded NATS listens for other processes (the CLI, external services)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "listen address of the gateway's HTTP API")
	fs.StringVar(&o.store, "store", "", "store URL (default chdb://DIR/chdb; or clickhouse://host:9000/db)")
	fs.StringVar(&o.otel, "otel", runtime.EnvOr(runtime.EnvOTel, "none"), "telemetry exporter: none, stdout or otlp")
	fs.StringVar(&o.logLevel, "log-level", runtime.EnvOr(runtime.EnvLogLevel, "info"), "log level: debug, info, warn, error")
	fs.StringVar(&o.campaigns, "campaigns", runtime.EnvOr("LOWBARENA_CAMPAIGNS", ""), "folder of campaign folders (default DIR/campaigns; `arena example DIR` writes one)")
	fs.IntVar(&o.runners, "runners", 1, "GPU runners in this process, one per GPU (0: jobs wait for runners started elsewhere)")
	fs.StringVar(&o.pod, "pod", runtime.EnvOr("LOWBARENA_POD", "pod-0"), "name of this machine for its runners: BF16 references are measured once per pod")
	fs.DurationVar(&o.ackWait, "runner-ack-wait", 30*time.Second, "a runner job's ack deadline (a dead runner's job moves on after about this long)")
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
	a, err := startArena(ctx, o, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "arena up: NATS %s · HTTP http://%s · store %s · data %s · campaigns %s\n", a.natsURL, a.httpAddr, a.storeEngine, a.data, strings.Join(a.campaigns, ","))
	fmt.Fprintf(stdout, "in another terminal: arena watch · arena submit DIR · arena show ID --json (Ctrl-C stops)\n")
	return a.wait()
}

// arenaProc is an arena running in this process.
type arenaProc struct {
	data, natsURL, httpAddr, storeEngine string
	// stages lists the pipeline stages some running service handles.
	stages []string
	// campaigns lists the tasks the arena runs.
	campaigns []string

	store store.Store
	ns    *server.Server
	rts   []*runtime.Runtime
	done  chan error
	lock  *os.File
	log   *slog.Logger
	prov  *observability.Providers
}

// startArena starts the embedded NATS server, then every service, each
// with its own runtime (its own NATS connection over the loopback
// listener, as if it ran in its own process), and runs them until ctx is
// cancelled.
func startArena(ctx context.Context, o upOptions, logOut io.Writer) (_ *arenaProc, err error) {
	data, err := filepath.Abs(o.data)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("up: create data folder: %w", err)
	}
	log, err := observability.NewLogger(logOut, "arena", o.logLevel, "text")
	if err != nil {
		return nil, usageErr("%v", err)
	}
	a := &arenaProc{data: data, done: make(chan error, 1), log: log}
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
	if a.prov, err = observability.Setup(ctx, observability.Config{Service: "arena", Version: "dev", Exporter: exp}); err != nil {
		return nil, fmt.Errorf("up: telemetry: %w", err)
	}
	if a.ns, err = startNATS(filepath.Join(data, "nats"), o.natsListen); err != nil {
		return nil, err
	}
	a.natsURL = a.ns.ClientURL()
	storeURL := o.store
	if storeURL == "" {
		storeURL = "chdb://" + filepath.Join(data, "chdb")
	}

	// newRuntime starts a service's runtime; only services that keep rows
	// open the store.
	newRuntime := func(service string, withStore bool) (*runtime.Runtime, error) {
		cfg := runtime.DefaultConfig(service)
		cfg.NATSURL, cfg.Store, cfg.OTel, cfg.LogLevel = a.natsURL, storeURL, o.otel, o.logLevel
		if !withStore {
			cfg.Store = ""
		}
		svcLog, err := observability.NewLogger(logOut, service, o.logLevel, "text")
		if err != nil {
			return nil, usageErr("%v", err)
		}
		rt, err := runtime.Start(ctx, cfg, runtime.WithLogger(svcLog), runtime.WithoutTelemetry())
		if err != nil {
			return nil, fmt.Errorf("up: start %s: %w", service, err)
		}
		a.rts = append(a.rts, rt)
		return rt, nil
	}

	var actors []runtime.Actor
	rt, err := newRuntime(gateway.Name, true)
	if err != nil {
		return nil, err
	}
	a.storeEngine = rt.Store.Engine()
	// The runners share the gateway's store: chDB is one engine per
	// process.
	a.store = rt.Store
	gw, err := gateway.New(ctx, rt, gateway.Options{HTTPAddr: o.httpAddr})
	if err != nil {
		return nil, err
	}
	a.httpAddr = gw.Addr.String()
	actors = append(actors, gw.Actors...)

	if rt, err = newRuntime(build.Name, false); err != nil {
		return nil, err
	}
	bs, err := build.New(ctx, rt.Bus, rt.Log, build.Options{WorkDir: filepath.Join(data, "build")})
	if err != nil {
		return nil, err
	}
	actors = append(actors, bs.Actors()...)

	campaignsDir := o.campaigns
	if campaignsDir == "" {
		campaignsDir = filepath.Join(data, "campaigns")
	}
	if rt, err = newRuntime(contract.Name, false); err != nil {
		return nil, err
	}
	set, err := loadCampaigns(campaignsDir, rt.Log)
	if err != nil {
		return nil, err
	}
	cs, err := contract.New(ctx, rt.Bus, rt.Log, contract.Options{Campaigns: set})
	if err != nil {
		return nil, err
	}
	actors = append(actors, cs.Actors()...)
	a.campaigns = set.Tasks()
	a.stages = []string{build.Name, contract.Name}

	if rt, err = newRuntime(quality.Name, false); err != nil {
		return nil, err
	}
	qs, err := quality.New(ctx, rt.Bus, rt.Log, quality.Options{Campaigns: set, Store: a.store})
	if err != nil {
		return nil, err
	}
	actors = append(actors, qs.Actors()...)
	a.stages = append(a.stages, quality.Name)

	if rt, err = newRuntime(score.Name, false); err != nil {
		return nil, err
	}
	ss, err := score.New(ctx, rt.Bus, rt.Log, score.Options{Store: a.store})
	if err != nil {
		return nil, err
	}
	actors = append(actors, ss.Actors()...)

	if rt, err = newRuntime(round.Name, false); err != nil {
		return nil, err
	}
	rds, err := round.New(ctx, rt.Bus, rt.Log, round.Options{Campaigns: set, Store: a.store, Pod: o.pod})
	if err != nil {
		return nil, err
	}
	actors = append(actors, rds.Actors()...)

	if rt, err = newRuntime(efficiency.Name, false); err != nil {
		return nil, err
	}
	es, err := efficiency.New(ctx, rt.Bus, rt.Log, efficiency.Options{Campaigns: set})
	if err != nil {
		return nil, err
	}
	actors = append(actors, es.Actors()...)
	a.stages = append(a.stages, efficiency.Name, score.Name)

	if o.runners > 0 {
		// Engines named by a bare command ("simengine ...") are looked up
		// beside this binary first: make build puts simengine there.
		if exe, err := os.Executable(); err == nil {
			os.Setenv("PATH", filepath.Dir(exe)+string(os.PathListSeparator)+os.Getenv("PATH"))
		}
		nvml, err := telemetry.Open()
		switch {
		case errors.Is(err, telemetry.ErrNoNVML):
			log.Warn("no NVML: runners watch engines through a simulated GPU and every figure says simulated", "err", err)
		case err != nil:
			return nil, fmt.Errorf("up: GPU telemetry: %w", err)
		}
		for i := range o.runners {
			if rt, err = newRuntime(runner.Name, false); err != nil {
				return nil, err
			}
			jr := job.Runner{NVML: nvml, SampleInterval: 100 * time.Millisecond, HealthTimeout: 5 * time.Minute, IdleTimeout: 60 * time.Second, StopGrace: 5 * time.Second}
			rs, err := runner.New(ctx, rt.Bus, rt.Log, runner.Options{Pod: o.pod, Runner: fmt.Sprintf("%s/runner-%d", o.pod, i),
				WorkDir: filepath.Join(data, "runner"), AckWait: o.ackWait, Job: jr, Store: a.store})
			if err != nil {
				return nil, err
			}
			actors = append(actors, rs.Actors()...)
		}
	}

	go func() { a.done <- runtime.RunActors(ctx, log, actors...) }()
	log.Info("arena up", "nats", a.natsURL, "http", a.httpAddr, "store", a.storeEngine, "data", data, "services", len(a.rts))
	return a, nil
}

// loadCampaigns loads the campaigns in dir. A folder that does not exist
// is an arena with no campaign yet: it runs, and refuses every submission
// with campaign_unknown_task, saying so at start.
func loadCampaigns(dir string, log *slog.Logger) (campaign.Set, error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		log.Warn("no campaigns folder; every submission will be refused until one exists (arena example DIR writes one, then --campaigns DIR/campaigns)", "folder", dir)
		return campaign.Set{}, nil
	}
	set, err := campaign.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	log.Info("campaigns loaded", "folder", dir, "tasks", set.Tasks())
	return set, nil
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
// listen (host:port; port 0 picks a free one).
func startNATS(dir, listen string) (*server.Server, error) {
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
	ns, err := server.NewServer(&server.Options{
		ServerName: "arena",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 2 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("up: nats-server: %w", err)
	}
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
