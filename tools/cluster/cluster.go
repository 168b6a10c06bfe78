package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/platform/app/apptest"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/campaigns"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
)

// Options configure a cluster.
type Options struct {
	// Root is the repository's root (deploy/nats is read from there).
	Root string
	// Dir holds everything the cluster writes: credentials, the nodes'
	// and ClickHouse's data, the services' folders and logs.
	Dir string
	// Bin are the binaries Build built.
	Bin Binaries
	// Campaigns is the campaigns folder pushed into the cluster's store
	// at start, as `arena campaign push` pushes it (`arena example DIR`
	// writes DIR/campaigns); the stages read it from there.
	Campaigns string
	// Pods name the machines, one runner each; default pod-a, pod-b. The
	// first is the rounds' default pod.
	Pods []string
	// RunnerAckWait is the runners' job ack deadline (--ack-wait): a
	// dead runner's job goes to another after about this long; default
	// 10 s.
	RunnerAckWait time.Duration
	// RoundEntryTimeout bounds a round entry's SLA job (--entry-timeout);
	// default the service's own.
	RoundEntryTimeout time.Duration
	// RoundLeaseTTL is the round service's pod lease (--lease-ttl);
	// default the service's own.
	RoundLeaseTTL time.Duration
	// ServiceEnv is added to every service's environment.
	ServiceEnv []string
}

// Service is one service process of the cluster.
type Service struct {
	*Proc
	// Kind is its binary's name (runner for every runner).
	Kind string
	// User is its NATS user.
	User string
	// Pod is a runner's pod.
	Pod string
	// MetricsAddr is where it serves /metrics, /healthz and /readyz
	// (LOWBARENA_METRICS_ADDR, a free loopback port, the same across its
	// restarts).
	MetricsAddr string
	// held says another fault holds the service down (the runner killed
	// mid-job): KillServices neither kills nor starts it meanwhile.
	held atomic.Bool
}

// Hold marks the service as held down by a fault: KillServices leaves it
// alone until Release.
func (s *Service) Hold() { s.held.Store(true) }

// Release ends Hold.
func (s *Service) Release() { s.held.Store(false) }

// Held says whether a fault holds the service down.
func (s *Service) Held() bool { return s.held.Load() }

// Cluster is a running cluster.
type Cluster struct {
	Options
	// Secrets holds the users' credentials (`arena credentials`).
	Secrets string
	Nodes   []*Node
	CH      *ClickHouse
	// Services are keyed by name: the service's, or runner-<pod>.
	Services map[string]*Service
	// URLs are the nodes' client URLs, comma-separated, as the services
	// get them.
	URLs string
	// HTTP is the gateway's listen address.
	HTTP string
	// NC is the harness's own connection, as the operator.
	NC *nats.Conn
	JS jetstream.JetStream

	// metricsPorts are the free ports services() gives out, one each.
	metricsPorts []int
}

// Start starts a cluster: the users' credentials (`arena credentials`),
// three nats-servers with deploy/nats's configuration, ClickHouse, the
// arena's streams, buckets and object stores at R3 (`gateway provision`
// as the operator), then every service as its own user, and waits until
// each says it started. On error what started is stopped.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if len(o.Pods) == 0 {
		o.Pods = []string{"pod-a", "pod-b"}
	}
	if o.RunnerAckWait <= 0 {
		o.RunnerAckWait = 10 * time.Second
	}
	c := &Cluster{Options: o, Secrets: filepath.Join(o.Dir, "secrets"), Services: map[string]*Service{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if out, err := exec.CommandContext(ctx, o.Bin.Arena, "credentials", c.Secrets).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cluster: arena credentials: %w\n%s", err, out)
	}
	pubs, err := readEnvFile(filepath.Join(c.Secrets, "nats.env"))
	if err != nil {
		return nil, err
	}
	if c.Nodes, err = startNodes(o.Dir, o.Bin.NATS, filepath.Join(o.Root, "deploy", "nats"), pubs); err != nil {
		return nil, err
	}
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.ClientURL
	}
	c.URLs = strings.Join(urls, ",")
	if c.CH, err = startClickHouse(o.Dir); err != nil {
		return nil, err
	}
	if err := c.provision(ctx); err != nil {
		return nil, err
	}
	if c.NC, err = c.Connect("cluster-harness"); err != nil {
		return nil, err
	}
	if c.JS, err = jetstream.New(c.NC); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := c.pushCampaigns(ctx); err != nil {
		return nil, err
	}
	// The gateway's HTTP port, then a metrics port per service.
	free, err := chtest.FreePorts(1 + len(Services) + len(c.Pods))
	if err != nil {
		return nil, err
	}
	c.HTTP = fmt.Sprintf("127.0.0.1:%d", free[0])
	c.metricsPorts = free[1:]
	for _, s := range c.services() {
		c.Services[s.Name] = s
		if err := s.Start(); err != nil {
			return nil, err
		}
	}
	for _, name := range c.ServiceNames() {
		if err := c.WaitStarted(ctx, c.Services[name], 2*time.Minute); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ServiceNames lists the services' names, sorted.
func (c *Cluster) ServiceNames() []string {
	names := make([]string, 0, len(c.Services))
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Env is the environment every client of the cluster shares: its NATS,
// R3, its ClickHouse, JSON logs (the services' settings in docs/operators/deploying.md).
func (c *Cluster) Env() []string {
	return []string{
		"LOWBARENA_NATS_URL=" + c.URLs,
		"LOWBARENA_REPLICAS=3",
		"LOWBARENA_STORE=" + c.CH.URL,
		"LOWBARENA_LOG_FORMAT=json",
		"LOWBARENA_OTEL=none",
		// The nodes' max_file_store is 2GB here (NodeConfig), and the
		// limits provisioned must fit it.
		"LOWBARENA_JS_VOLUME=2GiB",
	}
}

// userEnv is the user's environment file (LOWBARENA_NATS_NKEY, its seed).
func (c *Cluster) userEnv(user string) []string {
	env, err := readEnvFile(filepath.Join(c.Secrets, user+".env"))
	if err != nil {
		panic(err) // written by arena credentials before any service starts
	}
	return env
}

// provision runs `gateway provision` with the operator's credentials, as
// docker-compose.yml's one-shot job does, until it succeeds (the nodes'
// JetStream may still be electing its meta leader).
func (c *Cluster) provision(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cmd := exec.CommandContext(ctx, c.Bin.Service["gateway"], "provision")
		cmd.Env = append(append(os.Environ(), c.Env()...), c.userEnv("operator")...)
		cmd.Env = append(cmd.Env, "LOWBARENA_STORE=") // provisioning needs no store
		out, err := cmd.CombinedOutput()
		if err == nil {
			return os.WriteFile(filepath.Join(c.Dir, "logs", "provision.log"), out, 0o644)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: gateway provision: %w\n%s", err, out)
		}
		time.Sleep(time.Second) // retry interval, not an assertion
	}
}

// pushCampaigns pushes Options.Campaigns into the cluster's store as
// the operator, through the code `arena campaign push` runs; the stages
// load it from the campaigns bucket, as in a deployment.
func (c *Cluster) pushCampaigns(ctx context.Context) error {
	if c.Campaigns == "" {
		return nil
	}
	kv, err := c.JS.KeyValue(ctx, bus.BucketCampaigns)
	if err != nil {
		return fmt.Errorf("cluster: campaigns bucket: %w", err)
	}
	arts, err := artifact.NewJetStream(ctx, c.JS, bus.ObjectArtifacts)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if _, err := campaigns.Push(ctx, kv, arts, c.Campaigns, "cluster-harness", time.Now); err != nil {
		return fmt.Errorf("cluster: push the campaigns: %w", err)
	}
	return nil
}

// services are the cluster's service processes, not yet started.
func (c *Cluster) services() []*Service {
	var out []*Service
	add := func(name, kind string, env []string, args ...string) *Service {
		dir := filepath.Join(c.Dir, "services", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			panic(err)
		}
		env = append(append(append(c.Env(), c.userEnv(kind)...), "LOWBARENA_CAMPAIGNS_CACHE="+filepath.Join(dir, "campaigns-cache")), env...)
		metrics := fmt.Sprintf("127.0.0.1:%d", c.metricsPorts[len(out)])
		env = append(env, "LOWBARENA_METRICS_ADDR="+metrics)
		env = append(env, c.ServiceEnv...)
		s := &Service{Proc: &Proc{Name: name, Bin: c.Bin.Service[kind], Args: args, Env: env, Dir: dir,
			Log: filepath.Join(c.Dir, "logs", name+".log")}, Kind: kind, User: kind, MetricsAddr: metrics}
		out = append(out, s)
		return s
	}
	add("gateway", "gateway", []string{"LOWBARENA_HTTP=" + c.HTTP})
	add("build", "build", []string{"LOWBARENA_BUILD_WORK=" + filepath.Join(c.Dir, "services", "build", "work")})
	add("contract", "contract", nil)
	add("quality", "quality", nil)
	add("efficiency", "efficiency", nil)
	add("score", "score", nil)
	var roundArgs []string
	if c.RoundLeaseTTL > 0 {
		roundArgs = append(roundArgs, "--lease-ttl", c.RoundLeaseTTL.String())
	}
	if c.RoundEntryTimeout > 0 {
		roundArgs = append(roundArgs, "--entry-timeout", c.RoundEntryTimeout.String())
	}
	add("round", "round", nil, roundArgs...)
	for _, pod := range c.Pods {
		// A runner finds the campaign's engine (simengine, a bare
		// command) on its PATH, as the runner's image has it.
		s := add("runner-"+pod, "runner", []string{"LOWBARENA_POD=" + pod,
			"LOWBARENA_RUNNER_WORK=" + filepath.Join(c.Dir, "services", "runner-"+pod, "work"),
			"PATH=" + c.Bin.Dir + string(os.PathListSeparator) + os.Getenv("PATH")},
			"--name", pod+"/runner", "--ack-wait", c.RunnerAckWait.String())
		s.Pod = pod
	}
	return out
}

// WaitStarted waits until the service's log, since its latest start,
// says it started (runtime.Main's "started" line), or wait has passed.
func (c *Cluster) WaitStarted(ctx context.Context, s *Service, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		raw, _ := os.ReadFile(s.Log)
		if i := bytes.LastIndex(raw, []byte("=== cluster: start")); i >= 0 && bytes.Contains(raw[i:], []byte(`"msg":"started"`)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: %s did not start within %s:\n%s", s.Name, wait, s.LogTail(3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // polling interval, not an assertion
		}
	}
}

// Consumed scrapes every service's /metrics and returns, by service
// name, the messages its bus consumed since its latest start
// (lowbarena_events_consumed_total over every consumer and outcome; a
// restart starts it again from zero).
func (c *Cluster) Consumed(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	for _, name := range c.ServiceNames() {
		n, err := apptest.Consumed(ctx, "http://"+c.Services[name].MetricsAddr+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("cluster: %s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

// Connect connects to the cluster as the operator.
func (c *Cluster) Connect(name string) (*nats.Conn, error) {
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(c.Secrets, "operator.nk"))
	if err != nil {
		return nil, fmt.Errorf("cluster: operator's seed: %w", err)
	}
	nc, err := nats.Connect(c.URLs, opt, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("cluster: connect as the operator: %w", err)
	}
	return nc, nil
}

// Arena runs the light CLI against the cluster as the operator and
// returns its standard output, or an error with its standard error.
func (c *Cluster) Arena(ctx context.Context, args ...string) (string, error) {
	return c.ArenaWithin(ctx, 2*time.Minute, args...)
}

// ArenaWithin is Arena bounded by wait instead of 2 min (a round with
// --wait).
func (c *Cluster) ArenaWithin(ctx context.Context, wait time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bin.Arena, args...)
	cmd.Env = append(os.Environ(), "LOWBARENA_NATS_URL="+c.URLs, "LOWBARENA_NATS_CREDS="+filepath.Join(c.Secrets, "operator.nk"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("arena %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Runners are the runner services, in pod order.
func (c *Cluster) Runners() []*Service {
	var out []*Service
	for _, pod := range c.Pods {
		out = append(out, c.Services["runner-"+pod])
	}
	return out
}

// Close stops every process: the services first (SIGTERM, then SIGKILL
// after a few seconds), then ClickHouse and the nodes.
func (c *Cluster) Close() {
	if c.NC != nil {
		c.NC.Close()
	}
	for _, s := range c.Services {
		s.Terminate(5 * time.Second)
		s.Close()
	}
	if c.CH != nil {
		c.CH.Close()
	}
	for _, n := range c.Nodes {
		n.Close()
	}
}

// ErrNotReady is wrapped by the errors of waits that ran out.
var ErrNotReady = errors.New("cluster: not ready")

// lastWord is the last word of s: the id `arena submit` and `arena round
// start` print.
func lastWord(s string) string {
	f := strings.Fields(strings.TrimSpace(s))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}
