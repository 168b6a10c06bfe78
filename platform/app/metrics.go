package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// EnvMetricsAddr names the variable of --metrics-addr.
const EnvMetricsAddr = "LOWBARENA_METRICS_ADDR"

// The paths the metrics listener serves.
const (
	// PathMetrics is the Prometheus scrape path: the process's
	// OpenTelemetry metrics in the text exposition format, with the Go
	// runtime's and the process's collectors.
	PathMetrics = "/metrics"
	// PathHealthz answers 200 while the process serves HTTP at all: a
	// Kubernetes liveness probe.
	PathHealthz = "/healthz"
	// PathReadyz answers 200 when the process is connected to NATS and
	// finds the arena's streams as it expects them, 503 with the reason
	// otherwise: a Kubernetes readiness probe.
	PathReadyz = "/readyz"
)

// readyTimeout bounds one readiness check (a JetStream stream info
// request): a probe that waits longer than Kubernetes' default probe
// timeout (1 s) is a failed probe anyway.
const readyTimeout = 2 * time.Second

// ErrNotReady marks a failed readiness check.
var ErrNotReady = errors.New("not ready")

// Metrics is the Prometheus side of a process's OpenTelemetry metrics: an
// exporter that the meter provider reads through (Reader), registered on
// a registry of its own (never prometheus.DefaultRegisterer, which any
// library may fill), beside the Go runtime's and the process's
// collectors.
//
// The exporter is pulled: each scrape collects the instruments' current
// values, so nothing is exported between scrapes and nothing is lost by
// a scrape that does not come.
type Metrics struct {
	reg *prometheus.Registry
	exp *otelprom.Exporter
}

// NewMetrics returns the registry and exporter of one process.
//
// Names follow Prometheus's conventions
// (otlptranslator.UnderscoreEscapingWithSuffixes, set rather than left to
// the exporter's default, which its authors say may change): dots become
// underscores, a unit becomes a suffix (lowbarena.stage.duration in "s"
// is lowbarena_stage_duration_seconds), an annotation unit such as
// {event} is dropped, and counters end in _total
// (lowbarena_events_consumed_total).
func NewMetrics() (*Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("runtime: metrics: go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("runtime: metrics: process collector: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("runtime: metrics: prometheus exporter: %w", err)
	}
	return &Metrics{reg: reg, exp: exp}, nil
}

// Reader is the metric reader to give the meter provider.
func (m *Metrics) Reader() sdkmetric.Reader { return m.exp }

// Registry is the registry /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves PathMetrics, PathHealthz and PathReadyz; ready says
// whether the process is ready (nil) or why not.
func (m *Metrics) Handler(ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	// A collector that fails (a process file unreadable) leaves the
	// others' metrics served, with the error in the log of the scrape,
	// rather than a 500 that hides every metric.
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, Registry: m.reg}))
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "%v\n", err)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// validMetricsAddr checks a --metrics-addr value: host:port with a port
// number (0 for any free port); an empty host listens on every interface,
// as a container's address must.
func validMetricsAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q is not host:port (e.g. 0.0.0.0:9464 or 127.0.0.1:9464): %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("metrics address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

// ListenMetrics opens the metrics listener on addr, as Start does for
// --metrics-addr: a port another process holds is a configuration error
// (ErrConfig) that names the flag to change.
func ListenMetrics(addr string) (net.Listener, error) {
	if err := validMetricsAddr(addr); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics address %s: %w (choose another --metrics-addr or %s, or leave it empty to serve no metrics)",
			ErrConfig, addr, err, EnvMetricsAddr)
	}
	return ln, nil
}

// AddReadyCheck adds a check of the component's own to Ready, such as a
// machine requirement (the quality stage's sandbox): nil when ready,
// else why not. Build adds them; Ready runs them after its own, each time.
func (rt *Runtime) AddReadyCheck(check func(context.Context) error) {
	rt.readyMu.Lock()
	defer rt.readyMu.Unlock()
	rt.readyChecks = append(rt.readyChecks, check)
}

// Ready says whether the runtime can do its work: its NATS connection is
// up, the arena's streams are there as this service expects them
// (checkProvisioned: the ARENA stream, at this service's replicas), and
// the component's own checks (AddReadyCheck) pass. The check asks the
// server each time, so a stream deleted or a cluster replaced under a
// running service turns it unready.
func (rt *Runtime) Ready(ctx context.Context) error {
	if rt.NC == nil || rt.Bus == nil {
		return fmt.Errorf("%w: not connected to NATS yet", ErrNotReady)
	}
	if s := rt.NC.Status(); s != nats.CONNECTED {
		return fmt.Errorf("%w: NATS connection is %s", ErrNotReady, s)
	}
	if err := checkProvisioned(ctx, rt.Bus, rt.Config.Replicas); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	rt.readyMu.Lock()
	checks := rt.readyChecks
	rt.readyMu.Unlock()
	for _, check := range checks {
		if err := check(ctx); err != nil {
			return fmt.Errorf("%w: %w", ErrNotReady, err)
		}
	}
	return nil
}

// MetricsAddr is the address the metrics listener listens on, nil when
// --metrics-addr is empty.
func (rt *Runtime) MetricsAddr() net.Addr {
	if rt.metricsLn == nil {
		return nil
	}
	return rt.metricsLn.Addr()
}

// MetricsActor serves the metrics listener (PathMetrics, PathHealthz,
// PathReadyz of this runtime) until its context ends; ok is false when
// --metrics-addr is empty. Main runs it beside the component's actors.
func (rt *Runtime) MetricsActor() (_ Actor, ok bool) {
	if rt.metricsLn == nil {
		return Actor{}, false
	}
	return HTTPActor("metrics", rt.metricsLn, rt.metrics.Handler(rt.Ready), 5*time.Second), true
}
