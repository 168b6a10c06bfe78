package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

const goodRef = `{"repository":"https://huggingface.co/org/model","revision":"0123456789abcdef0123456789abcdef01234567",
 "files":[{"path":"config.json","size":100,"sha256":"` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `"},
          {"path":"model.safetensors","size":4000,"sha256":"` + "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" + `"}]}`

// TestSubmitOverHTTP: a participant's bundle posted with its token lands
// where `arena submit` puts one over NATS: the archive in the uploads
// object store, submission.received with the token's participant, and
// the record the gateway folds from it, which its participant and the
// operators read and nobody else.
func TestSubmitOverHTTP(t *testing.T) {
	g := startGateway(t, nil, nil)
	alice := g.add(t, "alice", participant.KindParticipant, participant.Limits{})
	bob := g.add(t, "bob", participant.KindParticipant, participant.Limits{})
	ops := g.add(t, "ops", participant.KindOperator, participant.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	body := packed(t, "alice", "dev", nil)
	a := g.do(t, http.MethodPost, "/v1/submissions", alice, body, map[string]string{"Lowbarena-Sha256": sha(body)})
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	id, _ := a.body["submission_id"].(string)
	require.True(t, events.ValidID(id), a.raw)
	require.Equal(t, "/v1/submissions/"+id, a.header.Get("Location"))
	require.Equal(t, "alice", a.body["participant"])
	require.Equal(t, map[string]any{"size": float64(len(body)), "sha256": sha(body), "files": float64(3)}, a.body["bundle"])

	// The event, as the build stage reads it.
	evs := bustest.Stored(t, g.b, "arena.submission.received."+id)
	require.Len(t, evs, 1)
	require.Equal(t, events.Source("gateway"), evs[0].Source())
	require.Equal(t, events.DeriveID(id, string(events.SubmissionReceived)), evs[0].ID())
	var got events.SubmissionReceivedData
	require.NoError(t, json.Unmarshal(evs[0].Data(), &got))
	require.Equal(t, "alice", got.Participant)
	require.Equal(t, "dev", got.Split)
	require.Equal(t, "qwen3-tiny", got.TaskID)
	require.Equal(t, "test-agent", got.Agent)
	require.Equal(t, "W8A8KV8", got.Solution.Precision)
	require.Equal(t, events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: id + ".tar.gz", Size: int64(len(body)), SHA256: sha(body), Files: 3}, got.Bundle)
	require.Nil(t, got.Reference)
	store, err := g.b.JetStream().ObjectStore(ctx, bus.ObjectUploads)
	require.NoError(t, err)
	stored, err := store.GetBytes(ctx, id+".tar.gz")
	require.NoError(t, err)
	require.Equal(t, body, stored, "the archive as uploaded")

	// The record: its participant's and the operators', 404 to others.
	require.Eventually(t, func() bool { return g.get(t, "/v1/submissions/"+id, alice).status == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	rec := g.get(t, "/v1/submissions/"+id, alice)
	require.Equal(t, "alice", rec.body["participant"])
	require.Equal(t, http.StatusOK, g.get(t, "/v1/submissions/"+id, ops).status)
	for who, token := range map[string]string{"the public": "", "another participant": bob} {
		a := g.get(t, "/v1/submissions/"+id, token)
		require.Equal(t, http.StatusNotFound, a.status, who)
		require.Equal(t, "submission_not_found", a.code(), who)
	}
	me := g.get(t, "/v1/me", alice)
	require.Equal(t, float64(1), me.body["usage"].(map[string]any)["submissions_last_day"])

	// By reference: the bundle is submission.json and checkpoint.json.
	ref := packed(t, "alice", "ranked", map[string]string{"checkpoint.json": goodRef, "config.json": "", "model.safetensors": ""})
	a = g.post(t, alice, ref)
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	refID := a.body["submission_id"].(string)
	require.Equal(t, map[string]any{"repository": "https://huggingface.co/org/model", "revision": "0123456789abcdef0123456789abcdef01234567",
		"files": float64(2), "bytes": float64(4100)}, a.body["reference"])
	evs = bustest.Stored(t, g.b, "arena.submission.received."+refID)
	require.Len(t, evs, 1)
	require.NoError(t, json.Unmarshal(evs[0].Data(), &got))
	require.NotNil(t, got.Reference)
	require.Equal(t, int64(4100), got.Reference.Bytes)
	// A ranked submission is public.
	require.Eventually(t, func() bool { return g.get(t, "/v1/submissions/"+refID, "").status == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	list := g.get(t, "/v1/submissions", "")
	require.Len(t, list.body["submissions"], 1, "the public lists the ranked one only")
}

// TestLeaderboardOverHTTP: the leaderboard and history come from the
// score service (here a responder on its subject, in its protocol) and
// are answered row by row as the viewer may read them.
func TestLeaderboardOverHTTP(t *testing.T) {
	g := startGateway(t, nil, nil)
	alice := g.add(t, "alice", participant.KindParticipant, participant.Limits{})
	bob := g.add(t, "bob", participant.KindParticipant, participant.Limits{})
	ops := g.add(t, "ops", participant.KindOperator, participant.Limits{})
	// Before any score service answers.
	a := g.get(t, "/v1/leaderboard", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, "scores_unavailable", a.code())

	rows := `{"rows":[{"submission_id":"a1","participant":"alice","split":"dev","score":0.3},` +
		`{"submission_id":"b1","participant":"bob","split":"ranked","score":0.2},{"submission_id":"b2","participant":"bob","split":"dev","score":0.1}]}`
	sub, err := g.b.Conn().Subscribe("lowbarena.ctl.leaderboard", func(m *nats.Msg) { _ = m.Respond([]byte(rows)) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, g.b.Conn().Flush(), "the responder is known to the server before the gateway asks")
	ids := func(a answer) []string {
		var out []string
		for _, r := range a.body["rows"].([]any) {
			out = append(out, r.(map[string]any)["submission_id"].(string))
		}
		return out
	}
	for who, tt := range map[string]struct {
		token string
		want  []string
	}{
		"the public":   {"", []string{"b1"}},
		"alice":        {alice, []string{"a1", "b1"}},
		"bob":          {bob, []string{"b1", "b2"}},
		"the operator": {ops, []string{"a1", "b1", "b2"}},
	} {
		a := g.get(t, "/v1/leaderboard?campaign=qwen3-tiny", tt.token)
		require.Equal(t, http.StatusOK, a.status, who)
		require.Equal(t, tt.want, ids(a), who)
	}
}

// TestPageOverTheGateway: the page and its files come with their policy
// from the running gateway.
func TestPageOverTheGateway(t *testing.T) {
	g := startGateway(t, nil, nil)
	resp, err := http.Get(g.url + "/")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(page), `/ui/app.js`)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		require.True(t, strings.Contains(csp, d), csp)
	}
}
