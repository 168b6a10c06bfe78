package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// TestPatchText: an engine patch's text is served, as stored and checked
// against the record's digest, to the operators and to the participant
// who wrote it; to anyone else, for a record without a patch, and for a
// patch whose text is gone, it is 404 patch_not_found.
func TestPatchText(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	arts, err := artifact.NewJetStream(ctx, f.b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	text := []byte("diff --git a/tools/simengine/scheduler.go b/tools/simengine/scheduler.go\n--- a/tools/simengine/scheduler.go\n+++ b/tools/simengine/scheduler.go\n@@ -1 +1 @@\n-old\n+new\n")
	sum := sha256.Sum256(text)
	digest := hex.EncodeToString(sum[:])
	_, err = arts.PutFile(ctx, digest, int64(len(text)), bytes.NewReader(text))
	require.NoError(t, err)
	put := func(id, who string, p *record.Patch) {
		rec := record.Submission{ID: id, Participant: who, Split: "ranked", Status: record.StatusRunning, CreatedAt: time.Unix(100, 0).UTC()}
		if p != nil {
			rec.Bundle = &record.Bundle{Patch: p}
		}
		body, err := json.Marshal(rec)
		require.NoError(t, err)
		_, err = f.records.Put(ctx, id, body)
		require.NoError(t, err)
	}
	put("patched", "alice", &record.Patch{Path: "engine.patch", Size: int64(len(text)), SHA256: digest})
	put("plain", "alice", nil)
	put("gone", "alice", &record.Patch{Path: "engine.patch", Size: 3, SHA256: hex.EncodeToString(make([]byte, 32))})

	tokens := map[string]string{"": "", "alice": f.alice, "bob": f.bob, "ops": f.op}
	for _, tc := range []struct {
		name, id, token string
		status          int
	}{
		{"an operator reads the text", "patched", "ops", 200},
		{"its participant reads the text", "patched", "alice", 200},
		{"another participant does not, though the record is public", "patched", "bob", 404},
		{"nor does the public", "patched", "", 404},
		{"a record without a patch", "plain", "ops", 404},
		{"a submission that does not exist", "nope", "ops", 404},
		{"a text no longer stored", "gone", "ops", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/submissions/"+tc.id+"/patch", nil)
			require.NoError(t, err)
			if tok := tokens[tc.token]; tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, string(body))
			if tc.status == 200 {
				require.Equal(t, text, body)
				require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
				require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
				return
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal(body, &m))
			require.Equal(t, string(reason.PatchNotFound), code(m))
		})
	}

	// The submission page links the text for those who may read it.
	for who, links := range map[string]bool{"ops": true, "alice": true, "bob": false, "": false} {
		req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/submissions/patched", nil)
		require.NoError(t, err)
		if tok := tokens[who]; tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, who)
		require.Contains(t, string(page), `id="patch"`, "%q sees the patch's summary", who)
		require.Equal(t, links, strings.Contains(string(page), `<a id="patch-text" href="/v1/submissions/patched/patch" data-auth-text>`), "%q's page links the text", who)
	}
}
