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

// Reason codes of decoding failures. They are stable: they end up in
// dead-letter headers and metrics.
const (
	// ReasonMalformed: not a binary-mode CloudEvent, a header that does not
	// decode, or an unsupported spec version.
	ReasonMalformed = "malformed_event"
	// ReasonMissingAttribute: a required attribute (id, source, type) is
	// missing or empty.
	ReasonMissingAttribute = "missing_attribute"
)

// DecodeError is returned by Decode; Reason is one of the Reason constants.
type DecodeError struct {
	Reason string
	Err    error
}

func (e *DecodeError) Error() string { return e.Reason + ": " + e.Err.Error() }
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
	h := nats.Header{}
	h.Set(HeaderSpecVersion, escape(e.SpecVersion()))
	h.Set(HeaderID, escape(e.ID()))
	h.Set(HeaderSource, escape(e.Source()))
	h.Set(HeaderType, escape(e.Type()))
	if s := e.Subject(); s != "" {
		h.Set(HeaderSubject, escape(s))
	}
	if t := e.Time(); !t.IsZero() {
		h.Set(HeaderTime, t.UTC().Format(time.RFC3339Nano))
	}
	if s := e.DataSchema(); s != "" {
		h.Set(HeaderDataSchema, escape(s))
	}
	if ct := e.DataContentType(); ct != "" {
		h.Set(HeaderContentType, escape(ct))
	}
	for name, v := range e.Extensions() {
		h.Set(HeaderPrefix+name, escape(fmt.Sprint(v)))
	}
	// The id is escaped like ce-id, so that an id with a line break cannot
	// forge a header; the same id always gives the same Nats-Msg-Id.
	h.Set(HeaderMsgID, escape(e.ID()))
	return &nats.Msg{Header: h, Data: e.Data()}, nil
}

// Detect tells the content mode of a message (see the package comment).
func Detect(h nats.Header, data []byte) Mode {
	binary := false
	for name, vs := range h {
		lower := strings.ToLower(name)
		if lower == "content-type" && len(vs) > 0 {
			ct, err := unquote(vs[0])
			if err == nil && strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), structuredPrefix) {
				return Structured
			}
		}
		if strings.HasPrefix(lower, HeaderPrefix) {
			binary = true
		}
	}
	if binary {
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
	if Detect(h, data) == Structured {
		return decodeStructured(data)
	}
	attrs := make(map[string]string, len(h))
	for name, vs := range h {
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, HeaderPrefix) || len(vs) == 0 {
			continue
		}
		if _, dup := attrs[lower]; dup || len(vs) > 1 {
			return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("header %s appears more than once", lower)}
		}
		v, err := unquote(vs[0])
		if err != nil {
			return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("header %s: %w", lower, err)}
		}
		if v, err = unescape(v); err != nil {
			return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("header %s: %w", lower, err)}
		}
		attrs[lower] = v
	}
	sv := attrs[HeaderSpecVersion]
	if sv == "" {
		return event.Event{}, &DecodeError{ReasonMalformed, errors.New("no ce-specversion header and no structured event in the body: not a CloudEvent " +
			"(send ce-specversion, ce-id, ce-source and ce-type headers, or the JSON event format with Content-Type: " + ContentTypeStructured + ")")}
	}
	if sv != event.CloudEventsVersionV1 {
		return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("spec version %q is not supported (want 1.0)", sv)}
	}
	var missing []string
	for _, a := range []struct{ name, header string }{{"id", HeaderID}, {"source", HeaderSource}, {"type", HeaderType}} {
		if attrs[a.header] == "" {
			missing = append(missing, a.name)
		}
	}
	if len(missing) > 0 {
		return event.Event{}, &DecodeError{ReasonMissingAttribute, fmt.Errorf("required attribute(s) %s missing", strings.Join(missing, ", "))}
	}
	e := event.New(event.CloudEventsVersionV1)
	for _, a := range []struct {
		header string
		set    func(string)
	}{
		{HeaderID, e.SetID}, {HeaderSource, e.SetSource}, {HeaderType, e.SetType},
		{HeaderSubject, e.SetSubject}, {HeaderDataSchema, e.SetDataSchema},
	} {
		if v := attrs[a.header]; v != "" {
			a.set(v)
		}
	}
	if v := attrs[HeaderTime]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("ce-time %q: %w", v, err)}
		}
		e.SetTime(t)
	}
	ct := attrs[HeaderContentType]
	if ct == "" {
		// A client that names the data's type in the message's own
		// Content-Type (the SDK's JetStream binding reads it so).
		for name, vs := range h {
			if strings.EqualFold(name, HeaderMessageContentType) && len(vs) == 1 {
				if v, err := unquote(vs[0]); err == nil {
					ct = strings.TrimSpace(v)
				}
			}
		}
	}
	for name, v := range attrs {
		switch name {
		case HeaderSpecVersion, HeaderID, HeaderSource, HeaderType, HeaderSubject, HeaderTime, HeaderDataSchema, HeaderContentType:
			continue
		}
		// An invalid extension name is recorded by the SDK and reported
		// by Validate below.
		e.SetExtension(strings.TrimPrefix(name, HeaderPrefix), v)
	}
	if len(data) > 0 || ct != "" {
		if ct == "" {
			ct = event.ApplicationJSON
		}
		// SetData with []byte stores the bytes as they are.
		if err := e.SetData(ct, data); err != nil {
			return event.Event{}, &DecodeError{ReasonMalformed, err}
		}
	}
	if err := e.Validate(); err != nil {
		return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("invalid attributes: %s", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))}
	}
	return e, nil
}

// decodeStructured reads the JSON event format.
func decodeStructured(data []byte) (event.Event, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		return event.Event{}, &DecodeError{ReasonMalformed, errors.New("structured mode: the body is a batch (a JSON array); the NATS binding has no batch mode, send one event per message")}
	}
	// The SDK reads the event (without validating it), so a missing
	// attribute can be told from a malformed event below.
	e := event.New(event.CloudEventsVersionV1)
	if err := e.UnmarshalJSON(data); err != nil {
		if missing := missingAttributes(data); len(missing) > 0 {
			// An empty source fails the SDK's URI parse: it is missing.
			return event.Event{}, &DecodeError{ReasonMissingAttribute, fmt.Errorf("required attribute(s) %s missing", strings.Join(missing, ", "))}
		}
		return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("structured mode: the body is not a JSON event: %s", strings.TrimSpace(err.Error()))}
	}
	if sv := e.SpecVersion(); sv != event.CloudEventsVersionV1 {
		return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("spec version %q is not supported (want 1.0)", sv)}
	}
	var missing []string
	for _, a := range []struct{ name, v string }{{"id", e.ID()}, {"source", e.Source()}, {"type", e.Type()}} {
		if a.v == "" {
			missing = append(missing, a.name)
		}
	}
	if len(missing) > 0 {
		return event.Event{}, &DecodeError{ReasonMissingAttribute, fmt.Errorf("required attribute(s) %s missing", strings.Join(missing, ", "))}
	}
	if len(e.Data()) > 0 && e.DataContentType() == "" {
		// JSON data without a content type is JSON, as in binary mode.
		e.SetDataContentType(event.ApplicationJSON)
	}
	if err := e.Validate(); err != nil {
		return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("invalid attributes: %s", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))}
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
	t := strings.Trim(s, " \t")
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
func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	// PathUnescape decodes %XX and leaves '+' alone, as the binding wants.
	out, err := url.PathUnescape(s)
	if err != nil {
		return "", err
	}
	if !utf8.ValidString(out) {
		return "", errors.New("percent-decoded value is not valid UTF-8")
	}
	return out, nil
}
