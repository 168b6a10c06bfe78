// Package ce is the CloudEvents 1.0 codec over NATS messages (the
// CloudEvents NATS protocol binding), in both of its content modes:
//
//   - binary: every attribute travels as a ce-<name> header, percent-encoded
//     as the binding requires, and the data as the message body;
//   - structured: the body is the event in the JSON event format, with the
//     header Content-Type: application/cloudevents+json (the only mode the
//     CloudEvents Go SDK's plain NATS binding speaks).
//
// Decode tells the modes apart as the binding says: a Content-Type that
// starts with application/cloudevents is structured; otherwise ce-*
// headers are binary; a message with no ce-* header whose body is a JSON
// object with a specversion is structured too (what a client of a NATS
// server older than 2.2, or the SDK, sends without any header).
//
// The event model is sdk-go v2's event.Event; only the header mapping is
// ours, because the SDK's JetStream bindings are either unreleased or on the
// legacy API and write header values without percent-encoding.
package ce

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Header names. NATS headers are case-sensitive; the binding's names are
// lower case.
const (
	HeaderPrefix      = "ce-"
	HeaderSpecVersion = "ce-specversion"
	HeaderID          = "ce-id"
	HeaderSource      = "ce-source"
	HeaderType        = "ce-type"
	HeaderSubject     = "ce-subject"
	HeaderTime        = "ce-time"
	HeaderDataSchema  = "ce-dataschema"
	HeaderContentType = "ce-datacontenttype"
	// HeaderMsgID is JetStream's deduplication header; it always equals the
	// (percent-encoded) event id, so a republished event is dropped within the stream's
	// duplicate window.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderContentType is the message's own content type: in structured
	// mode, ContentTypeStructured.
	HeaderMessageContentType = "Content-Type"
)

// ContentTypeStructured is the Content-Type of a structured-mode message:
// the JSON event format. Any Content-Type that starts with
// structuredPrefix (matched without regard to case) marks structured mode.
const ContentTypeStructured = "application/cloudevents+json"

const structuredPrefix = "application/cloudevents"

// Mode is a content mode of the binding.
type Mode int

// The content modes. The zero value is Binary, the arena's own.
const (
	// Binary carries the attributes in ce-* headers and the data as the
	// body.
	Binary Mode = iota
	// Structured carries the whole event, in the JSON event format, as the
	// body.
	Structured
)

// String names the mode as the binding does.
func (m Mode) String() string {
	if m == Structured {
		return "structured"
	}
	return "binary"
}

type modeKey struct{}

// WithMode returns a context that asks for events published under it to
// be written in mode m. The consume loop sets it to the mode of the event
// a handler is handling, so that what the arena publishes in answer comes
// in the mode the client asked in.
func WithMode(ctx context.Context, m Mode) context.Context {
	return context.WithValue(ctx, modeKey{}, m)
}

// ModeFrom returns the mode WithMode set on ctx, Binary when none.
func ModeFrom(ctx context.Context) Mode {
	m, _ := ctx.Value(modeKey{}).(Mode)
	return m
}

// DecodeError is returned by Decode; Reason is reason.MalformedEvent or
// reason.MissingAttribute.
type DecodeError struct {
	Reason reason.Code
	Err    error
}

func (e *DecodeError) Error() string { return string(e.Reason) + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// EncodeMode writes e as a NATS message in mode m (see Encode and
// EncodeStructured).
func EncodeMode(e event.Event, m Mode) (*nats.Msg, error) {
	if m == Structured {
		return EncodeStructured(e)
	}
	return Encode(e)
}

// EncodeStructured writes e as a NATS message in structured mode: the body
// is the event in the JSON event format (JSON data inline, other data as
// data_base64), Content-Type is ContentTypeStructured and Nats-Msg-Id is
// the id, percent-encoded as in binary mode. The caller sets the subject.
// It fails when e is not a valid CloudEvent.
func EncodeStructured(e event.Event) (*nats.Msg, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("ce: invalid event: %w", err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("ce: encode %s in structured mode: %w", e.ID(), err)
	}
	h := nats.Header{}
	h.Set(HeaderMessageContentType, ContentTypeStructured)
	h.Set(HeaderMsgID, escape(e.ID()))
	return &nats.Msg{Header: h, Data: body}, nil
}

// Encode writes e as a NATS message in binary mode. The caller sets the
// subject. It fails when e is not a valid CloudEvent.
func Encode(e event.Event) (*nats.Msg, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("ce: invalid event: %w", err)
	}
	exts := e.Extensions()
	// One map and one backing array for every header's value.
	h := make(nats.Header, 9+len(exts))
	vals := make([]string, 0, 9+len(exts))
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderSpecVersion, escape(e.SpecVersion()))
	set(HeaderID, escape(e.ID()))
	set(HeaderSource, escape(e.Source()))
	set(HeaderType, escape(e.Type()))
	if s := e.Subject(); s != "" {
		set(HeaderSubject, escape(s))
	}
	if t := e.Time(); !t.IsZero() {
		set(HeaderTime, t.UTC().Format(time.RFC3339Nano))
	}
	if s := e.DataSchema(); s != "" {
		set(HeaderDataSchema, escape(s))
	}
	if ct := e.DataContentType(); ct != "" {
		set(HeaderContentType, escape(ct))
	}
	for name, v := range exts {
		set(HeaderPrefix+name, escape(fmt.Sprint(v)))
	}
	// The id is escaped like ce-id, so that an id with a line break cannot
	// forge a header; the same id always gives the same Nats-Msg-Id.
	set(HeaderMsgID, h[HeaderID][0])
	return &nats.Msg{Header: h, Data: e.Data()}, nil
}

// SetHeader sets a binary-mode attribute header on h, percent-encoded as
// the binding requires (what Encode does for each attribute).
func SetHeader(h nats.Header, name, value string) { h[name] = []string{escape(value)} }

// Detect tells the content mode of a message (see the package comment).
func Detect(h nats.Header, data []byte) Mode {
	var sc headerScan
	sc.scan(h)
	return sc.mode(data)
}

// headerScan is what one pass over a message's headers finds: its ce-*
// headers (names lower-cased) and what its Content-Type says.
type headerScan struct {
	ce []headerAttr
	// structured: a Content-Type header starts with structuredPrefix.
	structured bool
	// contentType is the message's own Content-Type, unquoted and
	// trimmed, when exactly one value of it is there.
	contentType string
}

type headerAttr struct {
	name   string // lower case
	values []string
}

func (sc *headerScan) scan(h nats.Header) {
	for name, vs := range h {
		if strings.EqualFold(name, HeaderMessageContentType) && len(vs) > 0 {
			ct, err := unquote(vs[0])
			if err == nil && hasPrefixFold(strings.TrimSpace(ct), structuredPrefix) {
				sc.structured = true
			}
			if err == nil && len(vs) == 1 {
				sc.contentType = strings.TrimSpace(ct)
			}
		}
		if hasPrefixFold(name, HeaderPrefix) {
			if sc.ce == nil {
				sc.ce = make([]headerAttr, 0, len(h))
			}
			sc.ce = append(sc.ce, headerAttr{name: strings.ToLower(name), values: vs})
		}
	}
}

func (sc *headerScan) mode(data []byte) Mode {
	if sc.structured {
		return Structured
	}
	if len(sc.ce) > 0 {
		return Binary
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var probe struct {
			SpecVersion *json.RawMessage `json:"specversion"`
		}
		if json.Unmarshal(trimmed, &probe) == nil && probe.SpecVersion != nil {
			return Structured
		}
	}
	return Binary
}

// hasPrefixFold is strings.HasPrefix without regard to ASCII case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// Decode reads a CloudEvent from a NATS message's headers and body, in
// the mode Detect tells.
//
// Binary mode: header names are matched without regard to case (the
// binding's names are case-insensitive, while nats.Header.Get is not), so
// a ce-ID written by another client is read; two headers that differ only
// in case are malformed. Each value is first unquoted when it is a
// double-quoted string (RFC 7230 section 3.2.6, backslash escapes
// included), then percent-decoded once, as the binding requires.
//
// Both modes: a required attribute that is absent or empty is
// missing_attribute; one that is present but does not parse (a source that
// is not a URI reference) is malformed_event, as is a spec version other
// than 1.0.
func Decode(h nats.Header, data []byte) (event.Event, error) {
	e, _, err := DecodeMode(h, data)
	return e, err
}

// DecodeMode is Decode that also tells the mode the message came in
// (Detect's answer), reading the headers once for both.
func DecodeMode(h nats.Header, data []byte) (event.Event, Mode, error) {
	var sc headerScan
	sc.scan(h)
	if sc.mode(data) == Structured {
		e, err := decodeStructured(data)
		return e, Structured, err
	}
	e, err := decodeBinary(&sc, data)
	return e, Binary, err
}

// binaryAttrs are the context attributes of binary mode, read from their
// headers (unquoted and percent-decoded).
type binaryAttrs struct {
	specVersion, id, source, typ, subject, time, dataSchema, contentType string
}

func (a *binaryAttrs) slot(name string) *string {
	switch name {
	case HeaderSpecVersion:
		return &a.specVersion
	case HeaderID:
		return &a.id
	case HeaderSource:
		return &a.source
	case HeaderType:
		return &a.typ
	case HeaderSubject:
		return &a.subject
	case HeaderTime:
		return &a.time
	case HeaderDataSchema:
		return &a.dataSchema
	case HeaderContentType:
		return &a.contentType
	}
	return nil
}

func decodeBinary(sc *headerScan, data []byte) (event.Event, error) {
	var a binaryAttrs
	type extension struct{ name, value string }
	var exts []extension
	for i, hv := range sc.ce {
		if len(hv.values) == 0 {
			continue
		}
		dup := len(hv.values) > 1
		for _, prev := range sc.ce[:i] {
			dup = dup || (prev.name == hv.name && len(prev.values) > 0)
		}
		if dup {
			return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("header %s appears more than once", hv.name)}
		}
		v, err := unquote(hv.values[0])
		if err != nil {
			return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("header %s: %w", hv.name, err)}
		}
		if v, err = unescape(v); err != nil {
			return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("header %s: %w", hv.name, err)}
		}
		if p := a.slot(hv.name); p != nil {
			*p = v
		} else {
			exts = append(exts, extension{strings.TrimPrefix(hv.name, HeaderPrefix), v})
		}
	}
	if a.specVersion == "" {
		return event.Event{}, &DecodeError{reason.MalformedEvent, errors.New("no ce-specversion header and no structured event in the body: not a CloudEvent " +
			"(send ce-specversion, ce-id, ce-source and ce-type headers, or the JSON event format with Content-Type: " + ContentTypeStructured + ")")}
	}
	if a.specVersion != event.CloudEventsVersionV1 {
		return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("spec version %q is not supported (want 1.0)", a.specVersion)}
	}
	var missing []string
	for _, r := range []struct{ name, v string }{{"id", a.id}, {"source", a.source}, {"type", a.typ}} {
		if r.v == "" {
			missing = append(missing, r.name)
		}
	}
	if len(missing) > 0 {
		return event.Event{}, &DecodeError{reason.MissingAttribute, fmt.Errorf("required attribute(s) %s missing", strings.Join(missing, ", "))}
	}
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(a.id)
	setSource(&e, a.source)
	e.SetType(a.typ)
	if a.subject != "" {
		e.SetSubject(a.subject)
	}
	if a.dataSchema != "" {
		setDataSchema(&e, strings.TrimSpace(a.dataSchema))
	}
	if a.time != "" {
		t, err := time.Parse(time.RFC3339Nano, a.time)
		if err != nil {
			return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("ce-time %q: %w", a.time, err)}
		}
		e.SetTime(t)
	}
	ct := a.contentType
	if ct == "" {
		// A client that names the data's type in the message's own
		// Content-Type (the SDK's JetStream binding reads it so).
		ct = sc.contentType
	}
	for _, x := range exts {
		// An invalid extension name is recorded by the SDK and reported
		// by Validate below.
		e.SetExtension(x.name, x.value)
	}
	if len(data) > 0 || ct != "" {
		if ct == "" {
			ct = event.ApplicationJSON
		}
		// SetData with []byte stores the bytes as they are.
		if err := e.SetData(ct, data); err != nil {
			return event.Event{}, &DecodeError{reason.MalformedEvent, err}
		}
	}
	if err := e.Validate(); err != nil {
		return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("invalid attributes: %s", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))}
	}
	return e, nil
}

// decodeStructured reads the JSON event format.
func decodeStructured(data []byte) (event.Event, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		return event.Event{}, &DecodeError{reason.MalformedEvent, errors.New("structured mode: the body is a batch (a JSON array); the NATS binding has no batch mode, send one event per message")}
	}
	// The SDK reads the event (without validating it), so a missing
	// attribute can be told from a malformed event below.
	e := event.New(event.CloudEventsVersionV1)
	if err := e.UnmarshalJSON(data); err != nil {
		if missing := missingAttributes(data); len(missing) > 0 {
			// An empty source fails the SDK's URI parse: it is missing.
			return event.Event{}, &DecodeError{reason.MissingAttribute, fmt.Errorf("required attribute(s) %s missing", strings.Join(missing, ", "))}
		}
		return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("structured mode: the body is not a JSON event: %s", strings.TrimSpace(err.Error()))}
	}
	if sv := e.SpecVersion(); sv != event.CloudEventsVersionV1 {
		return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("spec version %q is not supported (want 1.0)", sv)}
	}
	var missing []string
	for _, a := range []struct{ name, v string }{{"id", e.ID()}, {"source", e.Source()}, {"type", e.Type()}} {
		if a.v == "" {
			missing = append(missing, a.name)
		}
	}
	if len(missing) > 0 {
		return event.Event{}, &DecodeError{reason.MissingAttribute, fmt.Errorf("required attribute(s) %s missing", strings.Join(missing, ", "))}
	}
	if len(e.Data()) > 0 && e.DataContentType() == "" {
		// JSON data without a content type is JSON, as in binary mode.
		e.SetDataContentType(event.ApplicationJSON)
	}
	if err := e.Validate(); err != nil {
		return event.Event{}, &DecodeError{reason.MalformedEvent, fmt.Errorf("invalid attributes: %s", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))}
	}
	return e, nil
}

// missingAttributes names the required attributes (id, source, type)
// that a JSON event lacks, holds as null or as an empty string; nil when
// the body is no JSON object or has all three.
func missingAttributes(data []byte) []string {
	var req map[string]json.RawMessage
	if json.Unmarshal(data, &req) != nil || req == nil {
		return nil
	}
	var missing []string
	for _, name := range []string{"id", "source", "type"} {
		var v string
		if raw, ok := req[name]; !ok || string(raw) == "null" || (json.Unmarshal(raw, &v) == nil && v == "") {
			missing = append(missing, name)
		}
	}
	return missing
}

// unquote undoes RFC 7230's quoting of a header value: a value that is a
// double-quoted string (after optional whitespace) loses its quotes and
// backslash escapes; any other value is returned as it is. A quoted
// string that does not close, or that is followed by anything but
// whitespace, is an error.
func unquote(s string) (string, error) {
	t := s
	for len(t) > 0 && (t[0] == ' ' || t[0] == '\t') {
		t = t[1:]
	}
	for len(t) > 0 && (t[len(t)-1] == ' ' || t[len(t)-1] == '\t') {
		t = t[:len(t)-1]
	}
	if !strings.HasPrefix(t, `"`) {
		return s, nil
	}
	var b strings.Builder
	for i := 1; i < len(t); i++ {
		switch c := t[i]; c {
		case '\\':
			if i+1 == len(t) {
				return "", errors.New("a quoted value ends in a lone backslash")
			}
			i++
			b.WriteByte(t[i])
		case '"':
			if i != len(t)-1 {
				return "", fmt.Errorf("a quoted value is followed by %q", t[i+1:])
			}
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("a quoted value does not end with a double quote")
}

// escape percent-encodes a header value as the NATS binding requires:
// space, double quote, percent and every byte outside U+0021..U+007E, with
// upper-case hex.
func escape(s string) string {
	need := false
	for i := 0; i < len(s); i++ {
		if mustEscape(s[i]) {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func mustEscape(c byte) bool { return c <= 0x20 || c >= 0x7F || c == '"' || c == '%' }

// unescape reverses escape; the result must be valid UTF-8.
//
// A "%" that does not begin a percent-encoded byte (%XX) is refused, not
// taken as the literal text: the binding requires one round of
// percent-decoding, and a value whose other "%"s happen to be followed
// by two hex digits would then be decoded in one place and kept in
// another. Values a client writes without encoding them (the CloudEvents
// Go SDK's JetStream binding, v2.16.2, writes them as they are) are read
// as they are as long as they hold no "%"; the error says how to send
// one that does.
func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	// PathUnescape decodes %XX and leaves '+' alone, as the binding wants.
	out, err := url.PathUnescape(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w; %s", clip(s, 80), err, percentHint)
	}
	if !utf8.ValidString(out) {
		return "", errors.New("percent-decoded value is not valid UTF-8")
	}
	return out, nil
}

// percentHint is what a client whose header value holds a "%" that does
// not begin a percent-encoded byte is told (in the dead letter's error).
const percentHint = `a "%" must begin a percent-encoded byte (%XX): the CloudEvents NATS binding requires header values percent-encoded ` +
	`("%" as %25, a space as %20, every byte outside ! to ~ as %XX), and some clients write them as they are (the CloudEvents Go SDK's JetStream binding does); ` +
	`percent-encode the value before setting it, or send the event in structured mode (Content-Type: ` + ContentTypeStructured + `, the event as JSON in the body, no header decoded)`

// clip is s cut to n bytes (and "..." marked), for a value quoted in an
// error.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
