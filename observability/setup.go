// Package observability sets up the arena's tracing, metrics and logs:
// OpenTelemetry providers with a stdout or OTLP exporter chosen by
// configuration, W3C trace context over NATS headers, and slog.
package observability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Exporter names where telemetry goes.
type Exporter string

// The exporters Setup knows.
const (
	// ExporterNone keeps the providers (so trace context still propagates
	// across hops) but exports nothing.
	ExporterNone Exporter = "none"
	// ExporterStdout writes spans and metrics as JSON lines to Config.Writer.
	ExporterStdout Exporter = "stdout"
	// ExporterOTLP sends spans and metrics over OTLP/HTTP to the endpoint in
	// the standard OTEL_EXPORTER_OTLP_ENDPOINT variables.
	ExporterOTLP Exporter = "otlp"
)

// ParseExporter validates an exporter name.
func ParseExporter(s string) (Exporter, error) {
	switch e := Exporter(strings.ToLower(strings.TrimSpace(s))); e {
	case ExporterNone, ExporterStdout, ExporterOTLP:
		return e, nil
	case "":
		return ExporterNone, nil
	default:
		return "", fmt.Errorf("observability: unknown exporter %q (want none, stdout or otlp)", s)
	}
}

// Config selects the service name and the exporter.
type Config struct {
	// Service is the service.name resource attribute.
	Service string
	// Version is the service.version resource attribute.
	Version string
	// Exporter chooses where spans and metrics go.
	Exporter Exporter
	// Writer receives stdout exports; nil means os.Stderr.
	Writer io.Writer
	// MetricInterval is the export period of metrics; zero means 30 s.
	MetricInterval time.Duration
	// Readers are further metric readers the meter provider feeds,
	// whatever the exporter: a Prometheus exporter that a /metrics
	// endpoint serves (platform/app) is pulled, not pushed, so it
	// sits beside the OTLP or stdout reader rather than replacing it.
	Readers []sdkmetric.Reader
}

// Providers holds the installed providers; Shutdown flushes and stops them.
type Providers struct {
	Tracer *sdktrace.TracerProvider
	Meter  *sdkmetric.MeterProvider
}

// Shutdown flushes pending telemetry and stops the providers.
func (p *Providers) Shutdown(ctx context.Context) error {
	return errors.Join(p.Tracer.Shutdown(ctx), p.Meter.Shutdown(ctx))
}

// Setup builds tracer and meter providers for cfg, installs them and the
// W3C trace-context propagator as the otel globals, and returns them.
func Setup(ctx context.Context, cfg Config) (*Providers, error) {
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version)))
	if err != nil {
		return nil, fmt.Errorf("observability: resource: %w", err)
	}
	w := cfg.Writer
	if w == nil {
		w = os.Stderr
	}
	interval := cfg.MetricInterval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	switch cfg.Exporter {
	case ExporterNone, "":
	case ExporterStdout:
		te, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("observability: stdout trace exporter: %w", err)
		}
		me, err := stdoutmetric.New(stdoutmetric.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("observability: stdout metric exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(te))
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(interval))))
	case ExporterOTLP:
		te, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("observability: otlp trace exporter: %w", err)
		}
		me, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("observability: otlp metric exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(te))
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(interval))))
	default:
		return nil, fmt.Errorf("observability: unknown exporter %q", cfg.Exporter)
	}
	for _, r := range cfg.Readers {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	p := &Providers{Tracer: sdktrace.NewTracerProvider(topts...), Meter: sdkmetric.NewMeterProvider(mopts...)}
	otel.SetTracerProvider(p.Tracer)
	otel.SetMeterProvider(p.Meter)
	otel.SetTextMapPropagator(Propagator())
	return p, nil
}

// Propagator is the propagator the arena uses on every hop: W3C trace
// context and baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// NewLogger returns a slog logger for a service: JSON or text lines on w at
// the given level ("debug", "info", "warn", "error"), with a service
// attribute on every line.
func NewLogger(w io.Writer, service, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("observability: log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("observability: log format %q (want text or json)", format)
	}
	return slog.New(h).With("service", service), nil
}
