// Package app is what every lowbarena service shares around its own
// logic: configuration from flags and the environment (validated before
// anything connects), the NATS connection and the arena's streams, the
// store, OpenTelemetry, slog, and actors run under one context with a
// graceful shutdown that drains consumers.
//
// A service's main.go is then a few lines:
//
//	cfg := runtime.DefaultConfig("gateway")
//	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
//	cfg.RegisterFlags(fs)
//	addr := fs.String("http", "127.0.0.1:8080", "listen address of the HTTP API")
//	runtime.Main(cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
//		return []runtime.Actor{...}, nil
//	})
package app

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Environment variables read by DefaultConfig. A flag given on the command
// line wins over its variable.
const (
	EnvNATSURL   = "LOWBARENA_NATS_URL"
	EnvStore     = "LOWBARENA_STORE"
	EnvOTel      = "LOWBARENA_OTEL"
	EnvLogLevel  = "LOWBARENA_LOG_LEVEL"
	EnvLogFormat = "LOWBARENA_LOG_FORMAT"
	EnvReplicas  = "LOWBARENA_REPLICAS"
)

// DefaultNATSURL is where services look for NATS when nothing says
// otherwise: the loopback listener of `arena up`.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// Config is the shared configuration of a service.
type Config struct {
	// Service names the service in logs, traces and NATS connection names.
	Service string
	// Version is the build's version, for telemetry resources.
	Version string
	// NATSURL is a comma-separated list of NATS server URLs.
	NATSURL string
	// Store is the store URL (chdb:///dir or clickhouse://host:9000/db);
	// empty for services that keep no telemetry or history.
	Store string
	// OTel selects the telemetry exporter: none, stdout or otlp (OTLP reads
	// the standard OTEL_EXPORTER_OTLP_* variables).
	OTel string
	// LogLevel is debug, info, warn or error; LogFormat is text or json.
	LogLevel, LogFormat string
	// Replicas is the replica count of streams this service provisions: 1
	// on one machine, 3 on a cluster.
	Replicas int
	// Limits bound the streams, buckets and object stores this service
	// provisions (zero fields: bus.Limits' defaults). A service that only
	// checks the arena's streams ignores them.
	Limits bus.Limits
	// ShutdownTimeout bounds the graceful drain at exit.
	ShutdownTimeout time.Duration
	// NATSAuth are the credentials the service connects with, and
	// NATSTLS its TLS files; see nats.go in this package.
	NATSAuth NATSAuth
	NATSTLS  NATSTLS
	// MetricsAddr is where the service serves /metrics (Prometheus),
	// /healthz and /readyz (see metrics.go); empty serves nothing.
	MetricsAddr string
	// Provision says whether Start creates or updates the arena's
	// streams, buckets and object stores: auto (the default) when the
	// service connects without credentials, yes, or no. Without, Start
	// checks that they exist.
	Provision string
}

// DefaultConfig returns the configuration of service with defaults taken
// from the environment.
func DefaultConfig(service string) Config {
	c := Config{
		Service:         service,
		Version:         "dev",
		NATSURL:         EnvOr(EnvNATSURL, DefaultNATSURL),
		Store:           os.Getenv(EnvStore),
		OTel:            EnvOr(EnvOTel, string(observability.ExporterNone)),
		LogLevel:        EnvOr(EnvLogLevel, "info"),
		LogFormat:       EnvOr(EnvLogFormat, "text"),
		Replicas:        1,
		ShutdownTimeout: 30 * time.Second,
		NATSAuth:        AuthFromEnv(),
		NATSTLS:         TLSFromEnv(),
		Provision:       EnvOr(EnvProvision, ProvisionAuto),
		MetricsAddr:     os.Getenv(EnvMetricsAddr),
		Limits:          LimitsFromEnv(),
	}
	if v := os.Getenv(EnvReplicas); v != "" {
		// A malformed value is kept as -1 and reported by Validate, rather
		// than silently replaced by the default.
		n, err := strconv.Atoi(v)
		if err != nil {
			n = -1
		}
		c.Replicas = n
	}
	return c
}

// RegisterFlags adds the shared flags to fs, with c's values as defaults.
// Parse fs, then call Validate.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NATSURL, "nats", c.NATSURL, "NATS server URL(s), comma-separated (env "+EnvNATSURL+")")
	fs.StringVar(&c.Store, "store", c.Store, "store URL: chdb:///abs/dir or clickhouse://host:9000/db (env "+EnvStore+")")
	fs.StringVar(&c.OTel, "otel", c.OTel, "telemetry exporter: none, stdout or otlp (env "+EnvOTel+")")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error (env "+EnvLogLevel+")")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json (env "+EnvLogFormat+")")
	fs.IntVar(&c.Replicas, "replicas", c.Replicas, "stream replicas: 1 on one machine, 3 on a cluster (env "+EnvReplicas+")")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "listen address of /metrics (Prometheus), /healthz and /readyz, e.g. 0.0.0.0:9464; empty serves none (env "+EnvMetricsAddr+")")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a graceful shutdown may take")
	RegisterLimitFlags(fs, &c.Limits)
	c.registerNATSFlags(fs)
}

// ErrConfig marks a configuration error; the process exits with status 2.
var ErrConfig = errors.New("invalid configuration")

// Validate checks every field before anything connects, and reports all
// problems at once.
func (c Config) Validate() error {
	var errs []string
	if c.Service == "" {
		errs = append(errs, "service name is empty")
	}
	if strings.TrimSpace(c.NATSURL) == "" {
		errs = append(errs, "NATS URL is empty (set --nats or "+EnvNATSURL+")")
	}
	for _, raw := range strings.Split(c.NATSURL, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			errs = append(errs, fmt.Sprintf("NATS URL %q is not nats://host:port", raw))
		}
	}
	if c.Store != "" {
		u, err := url.Parse(c.Store)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("store URL %q: %v", c.Store, err))
		case u.Scheme != "chdb" && u.Scheme != "clickhouse":
			errs = append(errs, fmt.Sprintf("store URL %q: scheme must be chdb or clickhouse", c.Store))
		case u.Scheme == "chdb" && !strings.HasPrefix(u.Path, "/"):
			errs = append(errs, fmt.Sprintf("store URL %q: chdb needs an absolute folder (chdb:///abs/dir)", c.Store))
		case u.Scheme == "clickhouse" && u.Host == "":
			errs = append(errs, fmt.Sprintf("store URL %q: clickhouse needs host:port", c.Store))
		}
	}
	if _, err := observability.ParseExporter(c.OTel); err != nil {
		errs = append(errs, err.Error())
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Sprintf("log level %q is not debug, info, warn or error", c.LogLevel))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Sprintf("log format %q is not text or json", c.LogFormat))
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		errs = append(errs, fmt.Sprintf("replicas %d: must be 1, 3 or 5", c.Replicas))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, "shutdown timeout must be positive")
	}
	if c.MetricsAddr != "" {
		if err := validMetricsAddr(c.MetricsAddr); err != nil {
			errs = append(errs, err.Error())
		}
	}
	errs = append(errs, ValidateLimits(c.Limits)...)
	errs = append(errs, c.NATSAuth.problems()...)
	errs = append(errs, c.NATSTLS.problems()...)
	switch c.Provision {
	case ProvisionAuto, ProvisionYes, ProvisionNo:
	default:
		errs = append(errs, fmt.Sprintf("provision %q is not auto, yes or no", c.Provision))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}

// EnvOr returns the environment variable key, or def when it is unset or
// empty. Services use it for the defaults of their own flags.
func EnvOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// Topology is the streams' topology this configuration provisions: its
// replicas and its JetStream limits.
func (c Config) Topology() bus.Topology {
	return bus.Topology{Replicas: c.Replicas, Limits: c.Limits}
}
