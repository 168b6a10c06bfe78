package observability

import (
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts NATS message headers to OpenTelemetry's TextMapCarrier.
//
// NATS headers are case-sensitive, and the W3C names are lower case
// (traceparent, tracestate). propagation.HeaderCarrier would canonicalize the
// keys to Traceparent, which other NATS clients do not read, so the carrier
// keeps keys exactly as given.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the first value of key, or "".
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
