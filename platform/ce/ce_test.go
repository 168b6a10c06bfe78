package ce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ce"
)

func newEvent(t *testing.T, id, source, typ string) event.Event {
	t.Helper()
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(id)
	e.SetSource(source)
	e.SetType(typ)
	return e
}

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 10, 13, 7, 46, 19, 123456789, time.FixedZone("CEST", 2*3600))
	cases := []struct {
		name string
		make func(t *testing.T) event.Event
		// headers that must appear on the wire exactly so (percent-encoded)
		wire map[string]string
		// extensions as they come back: binary mode carries strings
		ext map[string]any
	}{
		{
			name: "required attributes only",
			make: func(t *testing.T) event.Event {
				return newEvent(t, "id-1", "/lowbarena/gateway", "dev.lowbarena.build.started.v1")
			},
			wire: map[string]string{"ce-specversion": "1.0", "ce-id": "id-1", "ce-source": "/lowbarena/gateway", "Nats-Msg-Id": "id-1"},
		},
		{
			name: "every attribute",
			make: func(t *testing.T) event.Event {
				e := newEvent(t, "id-2", "/lowbarena/builder", "dev.lowbarena.build.completed.v1")
				e.SetSubject("b0c4e95f426f48e2")
				e.SetTime(at)
				e.SetDataSchema("https://lowbarena.dev/schemas/events/dev.lowbarena.build.completed.v1.json")
				require.NoError(t, e.SetData(event.ApplicationJSON, []byte(`{"submission_id":"b0c4e95f426f48e2"}`)))
				return e
			},
			wire: map[string]string{
				"ce-time":            "2026-10-13T05:46:19.123456789Z",
				"ce-datacontenttype": "application/json",
				"ce-dataschema":      "https://lowbarena.dev/schemas/events/dev.lowbarena.build.completed.v1.json",
			},
		},
		{
			name: "extensions",
			make: func(t *testing.T) event.Event {
				e := newEvent(t, "id-3", "/lowbarena/runner", "dev.lowbarena.runner.job.started.v1")
				e.SetExtension("partitionkey", "gpu 0/é")
				e.SetExtension("attempt", 3)
				e.SetExtension("simulated", true)
				return e
			},
			wire: map[string]string{"ce-partitionkey": "gpu%200/%C3%A9", "ce-attempt": "3", "ce-simulated": "true"},
			ext:  map[string]any{"partitionkey": "gpu 0/é", "attempt": "3", "simulated": "true"},
		},
		{
			name: "unicode, spaces, quotes and percent signs are percent-encoded",
			make: func(t *testing.T) event.Event {
				e := newEvent(t, `a b"c%d`, "/lowbarena/gateway", "dev.lowbarena.submission.received.v1")
				e.SetSubject("résumé 日本\t+~!")
				require.NoError(t, e.SetData("text/plain; charset=utf-8", []byte("héllo")))
				return e
			},
			wire: map[string]string{
				"ce-id":              "a%20b%22c%25d",
				"ce-subject":         "r%C3%A9sum%C3%A9%20%E6%97%A5%E6%9C%AC%09+~!",
				"ce-datacontenttype": "text/plain;%20charset=utf-8",
				"Nats-Msg-Id":        "a%20b%22c%25d",
			},
		},
		{
			name: "a value with a line break cannot inject a header",
			make: func(t *testing.T) event.Event {
				e := newEvent(t, "id-4\r\nNats-Msg-Id: evil", "/lowbarena/gateway", "dev.lowbarena.build.started.v1")
				e.SetSubject("x\r\nce-type: evil")
				return e
			},
			wire: map[string]string{"ce-id": "id-4%0D%0ANats-Msg-Id:%20evil", "ce-subject": "x%0D%0Ace-type:%20evil"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.make(t)
			require.NoError(t, in.Validate())
			msg, err := ce.Encode(in)
			require.NoError(t, err)
			for k, v := range tc.wire {
				require.Equal(t, []string{v}, msg.Header[k], "header %s", k)
			}
			for k, vs := range msg.Header {
				for _, v := range vs {
					for i := 0; i < len(v); i++ {
						require.True(t, v[i] > 0x20 && v[i] < 0x7F, "header %s=%q has a raw byte %q", k, v, v[i])
					}
				}
			}

			out, err := ce.Decode(msg.Header, msg.Data)
			require.NoError(t, err)
			require.Equal(t, in.ID(), out.ID())
			require.Equal(t, in.Source(), out.Source())
			require.Equal(t, in.Type(), out.Type())
			require.Equal(t, in.Subject(), out.Subject())
			require.Equal(t, in.DataSchema(), out.DataSchema())
			require.True(t, in.Time().Equal(out.Time()), "%s vs %s", in.Time(), out.Time())
			require.Equal(t, in.Data(), out.Data())
			require.Equal(t, in.DataContentType(), out.DataContentType())
			want := tc.ext
			if want == nil {
				want = map[string]any{}
			}
			got := out.Extensions()
			if got == nil {
				got = map[string]any{}
			}
			require.Equal(t, want, got)
			require.NoError(t, out.Validate())
		})
	}
}

func TestDecodeAcceptsHeaderNamesInAnyCase(t *testing.T) {
	h := nats.Header{}
	h["Ce-Specversion"] = []string{"1.0"}
	h["CE-ID"] = []string{"id-1"}
	h["ce-Source"] = []string{"/lowbarena/x"}
	h["ce-type"] = []string{"dev.lowbarena.build.started.v1"}
	h["Ce-Partitionkey"] = []string{"p%201"}
	e, err := ce.Decode(h, nil)
	require.NoError(t, err)
	require.Equal(t, "id-1", e.ID())
	require.Equal(t, "/lowbarena/x", e.Source())
	require.Equal(t, map[string]any{"partitionkey": "p 1"}, e.Extensions())
}

func TestEncodeRefusesInvalidEvents(t *testing.T) {
	e := event.New(event.CloudEventsVersionV1)
	e.SetID("x")
	_, err := ce.Encode(e)
	require.ErrorContains(t, err, "invalid event")
}

func TestDecodeMalformed(t *testing.T) {
	good := func() nats.Header {
		return nats.Header{
			"ce-specversion": {"1.0"},
			"ce-id":          {"id-1"},
			"ce-source":      {"/lowbarena/gateway"},
			"ce-type":        {"dev.lowbarena.build.started.v1"},
		}
	}
	h, err := ce.Decode(good(), []byte(`{}`))
	require.NoError(t, err, "the base case decodes")
	require.Equal(t, event.ApplicationJSON, h.DataContentType(), "data without a content type is JSON")

	cases := []struct {
		name   string
		edit   func(h nats.Header)
		reason reason.Code
	}{
		{"no headers at all", func(h nats.Header) { clear(h) }, reason.MalformedEvent},
		{"no specversion (structured or plain NATS)", func(h nats.Header) { delete(h, "ce-specversion") }, reason.MalformedEvent},
		{"spec version 0.3", func(h nats.Header) { h.Set("ce-specversion", "0.3") }, reason.MalformedEvent},
		{"broken percent escape", func(h nats.Header) { h.Set("ce-subject", "a%zzb") }, reason.MalformedEvent},
		{"truncated percent escape", func(h nats.Header) { h.Set("ce-subject", "ab%4") }, reason.MalformedEvent},
		{"escape decodes to invalid UTF-8", func(h nats.Header) { h.Set("ce-subject", "a%FFb") }, reason.MalformedEvent},
		{"bad escape in an extension", func(h nats.Header) { h.Set("ce-partitionkey", "%G0") }, reason.MalformedEvent},
		{"time not RFC 3339", func(h nats.Header) { h.Set("ce-time", "yesterday") }, reason.MalformedEvent},
		{"extension name not alphanumeric", func(h nats.Header) { h.Set("ce-bad_name", "x") }, reason.MalformedEvent},
		{"source not a URI reference", func(h nats.Header) { h.Set("ce-source", "%3A%2F%2F%25") }, reason.MalformedEvent},
		{"dataschema not a URI", func(h nats.Header) { h.Set("ce-dataschema", "%3A%2F%2F") }, reason.MalformedEvent},
		{"the same attribute twice, in different case", func(h nats.Header) { h["CE-ID"] = []string{"id-2"} }, reason.MalformedEvent},
		{"two values of one attribute", func(h nats.Header) { h.Add("ce-type", "dev.lowbarena.build.failed.v1") }, reason.MalformedEvent},
		{"missing id", func(h nats.Header) { delete(h, "ce-id") }, reason.MissingAttribute},
		{"empty id", func(h nats.Header) { h.Set("ce-id", "") }, reason.MissingAttribute},
		{"missing source", func(h nats.Header) { delete(h, "ce-source") }, reason.MissingAttribute},
		{"missing type", func(h nats.Header) { delete(h, "ce-type") }, reason.MissingAttribute},
		{"missing everything but specversion", func(h nats.Header) {
			delete(h, "ce-id")
			delete(h, "ce-source")
			delete(h, "ce-type")
		}, reason.MissingAttribute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			tc.edit(h)
			_, err := ce.Decode(h, []byte(`{}`))
			require.Error(t, err)
			var de *ce.DecodeError
			require.True(t, errors.As(err, &de), "a DecodeError: %v", err)
			require.Equal(t, tc.reason, de.Reason, "%v", err)
			require.Contains(t, err.Error(), tc.reason)
			require.NotNil(t, errors.Unwrap(err))
		})
	}
}

func TestStructuredRoundTrip(t *testing.T) {
	at := time.Date(2026, 10, 13, 7, 46, 19, 123456789, time.UTC)
	cases := []struct {
		name string
		make func(t *testing.T) event.Event
	}{
		{"JSON data", func(t *testing.T) event.Event {
			e := newEvent(t, "id-s1", "/participants/example-team", "dev.lowbarena.submission.received.v1")
			e.SetSubject("b0c4e95f426f48e2")
			e.SetTime(at)
			e.SetDataSchema("https://lowbarena.dev/schemas/events/dev.lowbarena.submission.received.v1.json")
			require.NoError(t, e.SetData(event.ApplicationJSON, []byte(`{"submission_id":"b0c4e95f426f48e2","n":1}`)))
			return e
		}},
		{"text data travels as data_base64", func(t *testing.T) event.Event {
			e := newEvent(t, `a b"c%d`, "/lowbarena/gateway", "dev.lowbarena.build.started.v1")
			require.NoError(t, e.SetData("text/plain; charset=utf-8", []byte("héllo")))
			return e
		}},
		{"no data", func(t *testing.T) event.Event {
			return newEvent(t, "id-s3", "/lowbarena/x", "dev.lowbarena.build.started.v1")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.make(t)
			msg, err := ce.EncodeMode(in, ce.Structured)
			require.NoError(t, err)
			require.Equal(t, ce.ContentTypeStructured, msg.Header.Get("Content-Type"))
			for k := range msg.Header {
				require.False(t, len(k) > 3 && k[:3] == "ce-", "structured mode carries no ce-* header, got %s", k)
			}
			require.NotEmpty(t, msg.Header.Get(ce.HeaderMsgID), "JetStream still deduplicates by the id")
			require.Equal(t, ce.Structured, ce.Detect(msg.Header, msg.Data))

			out, err := ce.Decode(msg.Header, msg.Data)
			require.NoError(t, err)
			require.Equal(t, in.ID(), out.ID())
			require.Equal(t, in.Source(), out.Source())
			require.Equal(t, in.Type(), out.Type())
			require.Equal(t, in.Subject(), out.Subject())
			require.Equal(t, in.DataSchema(), out.DataSchema())
			require.True(t, in.Time().Equal(out.Time()))
			require.Equal(t, in.DataContentType(), out.DataContentType())
			if len(in.Data()) > 0 && in.DataContentType() == event.ApplicationJSON {
				require.JSONEq(t, string(in.Data()), string(out.Data()))
			} else {
				require.Equal(t, in.Data(), out.Data())
			}
		})
	}
}

// TestDetect follows the binding's rule (section 3): a Content-Type that
// starts with application/cloudevents is structured, ce-* headers are
// binary, and a message without headers whose body is an event (what the
// CloudEvents Go SDK's plain NATS binding sends) is structured.
func TestDetect(t *testing.T) {
	event := []byte(`{"specversion":"1.0","id":"x","source":"/s","type":"t"}`)
	cases := []struct {
		name string
		h    nats.Header
		body []byte
		want ce.Mode
	}{
		{"content type", nats.Header{"Content-Type": {"application/cloudevents+json"}}, event, ce.Structured},
		{"content type in other case, with parameters", nats.Header{"content-type": {"Application/CloudEvents+JSON; charset=utf-8"}}, event, ce.Structured},
		{"quoted content type", nats.Header{"Content-Type": {`"application/cloudevents+json"`}}, event, ce.Structured},
		{"no header, an event in the body", nil, event, ce.Structured},
		{"no header, an event after whitespace", nil, append([]byte("\n  "), event...), ce.Structured},
		{"ce headers", nats.Header{"ce-specversion": {"1.0"}}, event, ce.Binary},
		{"ce headers beside a JSON content type", nats.Header{"ce-specversion": {"1.0"}, "Content-Type": {"application/json"}}, []byte(`{}`), ce.Binary},
		{"no header, JSON without specversion", nil, []byte(`{"id":"x"}`), ce.Binary},
		{"no header, not JSON", nil, []byte("hello"), ce.Binary},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ce.Detect(tc.h, tc.body))
		})
	}
}

func TestDecodeStructuredRefuses(t *testing.T) {
	h := nats.Header{"Content-Type": {ce.ContentTypeStructured}}
	cases := []struct {
		name   string
		body   string
		reason reason.Code
		says   string
	}{
		{"not JSON", `not json`, reason.MalformedEvent, "not a JSON event"},
		{"a batch", `[{"specversion":"1.0","id":"x","source":"/s","type":"t"}]`, reason.MalformedEvent, "batch"},
		{"no specversion", `{"id":"x","source":"/s","type":"t"}`, reason.MalformedEvent, "specversion"},
		{"spec version 0.3", `{"specversion":"0.3","id":"x","source":"/s","type":"t"}`, reason.MalformedEvent, "0.3"},
		{"missing id", `{"specversion":"1.0","source":"/s","type":"t"}`, reason.MissingAttribute, "id"},
		{"empty source, null type", `{"specversion":"1.0","id":"x","source":"","type":null}`, reason.MissingAttribute, "source, type"},
		{"time not RFC 3339", `{"specversion":"1.0","id":"x","source":"/s","type":"t","time":"yesterday"}`, reason.MalformedEvent, "time"},
		{"bad extension name", `{"specversion":"1.0","id":"x","source":"/s","type":"t","bad_name":"v"}`, reason.MalformedEvent, "attribute names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ce.Decode(h, []byte(tc.body))
			var de *ce.DecodeError
			require.True(t, errors.As(err, &de), "a DecodeError: %v", err)
			require.Equal(t, tc.reason, de.Reason, "%v", err)
			require.Contains(t, err.Error(), tc.says)
		})
	}
}

// TestDecodeUnquotes reads header values as the binding requires: a
// double-quoted value (RFC 7230 section 3.2.6) is unquoted, backslash
// escapes included, before one round of percent-decoding.
func TestDecodeUnquotes(t *testing.T) {
	base := func() nats.Header {
		return nats.Header{"ce-specversion": {`"1.0"`}, "ce-id": {`"id 1"`}, "ce-source": {`"/participants/example-team"`},
			"ce-type": {"dev.lowbarena.submission.received.v1"}}
	}
	cases := []struct {
		name, value, want string
	}{
		{"plain", "b0c4e95f426f48e2", "b0c4e95f426f48e2"},
		{"quoted", `"b0c4e95f426f48e2"`, "b0c4e95f426f48e2"},
		{"quoted with whitespace around", ` "abc" `, "abc"},
		{"quoted with a space inside", `"a b"`, "a b"},
		{"backslash escapes", `"a\"b\\c"`, `a"b\c`},
		{"quoted, then percent-decoded once", `"r%C3%A9sum%C3%A9%2541"`, "résumé%41"},
		{"a quote inside an unquoted value stays", `a"b`, `a"b`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := base()
			h.Set("ce-subject", tc.value)
			e, err := ce.Decode(h, nil)
			require.NoError(t, err)
			require.Equal(t, tc.want, e.Subject())
			require.Equal(t, "id 1", e.ID())
			require.Equal(t, "/participants/example-team", e.Source())
		})
	}
	for _, bad := range []string{`"abc`, `"abc"def`, `"abc\`} {
		t.Run("refused "+bad, func(t *testing.T) {
			h := base()
			h.Set("ce-subject", bad)
			_, err := ce.Decode(h, nil)
			var de *ce.DecodeError
			require.True(t, errors.As(err, &de), "%v", err)
			require.Equal(t, reason.MalformedEvent, de.Reason)
			require.Contains(t, err.Error(), "ce-subject")
		})
	}
}

func TestBinaryTakesTheMessageContentType(t *testing.T) {
	h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"x"}, "ce-source": {"/s"}, "ce-type": {"t"}, "Content-Type": {"text/plain"}}
	e, err := ce.Decode(h, []byte("hi"))
	require.NoError(t, err)
	require.Equal(t, "text/plain", e.DataContentType())
	h.Set("ce-datacontenttype", "application/json")
	e, err = ce.Decode(h, []byte("{}"))
	require.NoError(t, err)
	require.Equal(t, "application/json", e.DataContentType(), "ce-datacontenttype wins")
}

func TestModeInContext(t *testing.T) {
	ctx := context.Background()
	require.Equal(t, ce.Binary, ce.ModeFrom(ctx))
	require.Equal(t, ce.Structured, ce.ModeFrom(ce.WithMode(ctx, ce.Structured)))
	require.Equal(t, "structured", ce.Structured.String())
	require.Equal(t, "binary", ce.Binary.String())
}
