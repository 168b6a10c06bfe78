package ce_test

import (
	"bytes"
	"context"
	"net/url"
	"testing"

	cejsm "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ce"
)

// TestSDKJetStreamBindingHeaders: the official CloudEvents Go SDK's
// JetStream binding (v2.16.2) writes binary-mode header values as they
// are, without the percent-encoding the NATS binding requires. What it
// writes is read as it is while it holds no "%" (spaces, non-ASCII); an
// id with a "%" that begins no percent-encoded byte ("upload 100% done")
// is refused as malformed_event with a sentence that says what to do,
// and the same id percent-encoded by the client before the SDK writes it
// is read as the client meant it.
func TestSDKJetStreamBindingHeaders(t *testing.T) {
	viaSDK := func(t *testing.T, id string) (event.Event, error) {
		t.Helper()
		e := event.New()
		e.SetID(id)
		e.SetSource("/participants/team-a")
		e.SetType("dev.lowbarena.submission.received.v1")
		require.NoError(t, e.SetData(event.ApplicationJSON, map[string]string{"submission_id": "sub-1"}))
		var body bytes.Buffer
		h, err := cejsm.WriteMsg(context.Background(), binding.ToMessage(&e), &body)
		require.NoError(t, err)
		require.Equal(t, id, h.Get(ce.HeaderID), "the SDK writes the id as it is")
		return ce.Decode(h, body.Bytes())
	}

	for _, id := range []string{"sub-1", "upload done", "résumé ✓"} {
		got, err := viaSDK(t, id)
		require.NoError(t, err, id)
		require.Equal(t, id, got.ID())
	}

	_, err := viaSDK(t, "upload 100% done")
	require.Error(t, err)
	var de *ce.DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, reason.MalformedEvent, de.Reason)
	for _, want := range []string{"ce-id", `"upload 100% done"`, "%25", "the CloudEvents Go SDK's JetStream binding", "structured mode", ce.ContentTypeStructured} {
		require.Contains(t, err.Error(), want)
	}

	got, err := viaSDK(t, url.PathEscape("upload 100% done"))
	require.NoError(t, err)
	require.Equal(t, "upload 100% done", got.ID(), "a client that percent-encodes the value itself is read as it meant")

	// Structured mode carries the id as JSON, so the SDK's own plain
	// NATS binding (structured only) needs no encoding at all.
	e := event.New()
	e.SetID("upload 100% done")
	e.SetSource("/participants/team-a")
	e.SetType("dev.lowbarena.submission.received.v1")
	m, err := ce.EncodeStructured(e)
	require.NoError(t, err)
	got, err = ce.Decode(m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, "upload 100% done", got.ID())
}
