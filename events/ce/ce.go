// Package ce is the CloudEvents 1.0 binary-mode codec over NATS headers
// (the CloudEvents NATS protocol binding): every attribute travels as a
// ce-<name> header, percent-encoded as the binding requires, and the data as
// the message body.
//
// The event model is sdk-go v2's event.Event; only the header mapping is
// ours, because the SDK's JetStream bindings are either unreleased or on the
// legacy API and write header values without percent-encoding.
package ce

import (
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
)

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

// Decode reads a binary-mode CloudEvent from NATS headers and data.
//
// Header names are matched without regard to case (the binding's names are
// case-insensitive, while nats.Header.Get is not), so a ce-ID written by
// another client is read; two headers that differ only in case are
// malformed. A required attribute that is absent or empty is
// missing_attribute; one that is present but does not parse (a source that
// is not a URI reference) is malformed_event.
func Decode(h nats.Header, data []byte) (event.Event, error) {
	attrs := make(map[string]string, len(h))
	for name, vs := range h {
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, HeaderPrefix) || len(vs) == 0 {
			continue
		}
		if _, dup := attrs[lower]; dup || len(vs) > 1 {
			return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("header %s appears more than once", lower)}
		}
		v, err := unescape(vs[0])
		if err != nil {
			return event.Event{}, &DecodeError{ReasonMalformed, fmt.Errorf("header %s: %w", lower, err)}
		}
		attrs[lower] = v
	}
	sv := attrs[HeaderSpecVersion]
	if sv == "" {
		return event.Event{}, &DecodeError{ReasonMalformed, errors.New("no ce-specversion header: not a binary-mode CloudEvent")}
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
