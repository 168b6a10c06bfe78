package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPatchFault checks how a bundle names its engine's simulated
// behaviour: the line of the engine patch its submission.json declares.
func TestPatchFault(t *testing.T) {
	write := func(decl, patch string) string {
		dir := t.TempDir()
		if decl != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "submission.json"), []byte(decl), 0o644))
		}
		if patch != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "engine.patch"), []byte(patch), 0o644))
		}
		return dir
	}
	withPatch := `{"engine": {"patch": "engine.patch"}}`
	cases := []struct {
		name, decl, patch, fault string
		err                      bool
	}{
		{"no declaration", "", "", "", false},
		{"no patch declared", `{"engine": {"command": "x"}}`, "# simengine-fault: answer-cache\n", "", false},
		{"a patch naming a fault", withPatch, "# a comment\n# simengine-fault: answer-cache\n--- a/x\n+++ b/x\n", "answer-cache", false},
		{"an added line naming it", withPatch, "+# simengine-fault: pad-tokens\n", "pad-tokens", false},
		{"a patch naming none", withPatch, "--- a/x\n+++ b/x\n", "", false},
		{"a declared patch missing", withPatch, "", "", true},
	}
	for _, c := range cases {
		got, err := PatchFault(write(c.decl, c.patch))
		if c.err {
			require.Error(t, err, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, c.fault, got, c.name)
		if got != "" {
			_, err := ParseFault(got)
			require.NoError(t, err, c.name)
		}
	}
}

// TestIgnoreEOSAndCheats: an eval item's reply ends it (finish stop)
// unless ignore_eos asks for max_tokens, as vLLM does; the answer cache
// replays a repeated streamed prompt at once; padding streams each token
// in two chunks and claims them all.
func TestIgnoreEOSAndCheats(t *testing.T) {
	item := "Compute 12 + 3 * 4 - 5. Reply with the number only."
	stream := func(url, prompt string, ignoreEOS bool) streamResult {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp := post(t, ctx, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 24, "stream": true,
			"ignore_eos": ignoreEOS, "temperature": 0, "stream_options": map[string]any{"include_usage": true}})
		return readSSE(t, resp.Body, false)
	}
	ts, _ := newTestServer(t, "none")
	stop := stream(ts.URL, item, false)
	require.Less(t, len(stop.content), 24, "the reply ends the stream")
	full := stream(ts.URL, item, true)
	require.Len(t, full.content, 24, "ignore_eos: max_tokens")
	require.True(t, strings.HasPrefix(strings.Join(full.content, ""), strings.Join(stop.content, "")), "the reply, then more")
	require.EqualValues(t, 24, full.usage.CompletionTokens)

	cache, cs := newTestServer(t, "answer-cache")
	first := stream(cache.URL, testPrompt, true)
	generated := cs.Sched.Stats().TotalTokens
	again := stream(cache.URL, testPrompt, true)
	require.Equal(t, first.content, again.content, "the same answer")
	require.Equal(t, generated, cs.Sched.Stats().TotalTokens, "replayed without generating a token")
	other := stream(cache.URL, testPrompt+" again", true)
	require.Len(t, other.content, 24)
	require.Equal(t, generated+24, cs.Sched.Stats().TotalTokens, "another prompt is generated")

	pad, ps := newTestServer(t, "pad-tokens")
	padded := stream(pad.URL, testPrompt, true)
	honest := stream(ts.URL, testPrompt, true)
	require.EqualValues(t, 12, ps.Sched.Stats().TotalTokens, "half the tokens generated")
	require.Len(t, padded.content, 24, "as many chunks as asked")
	require.EqualValues(t, 24, padded.usage.CompletionTokens, "and claimed")
	require.Less(t, len(strings.Join(padded.content, "")), len(strings.Join(honest.content, "")), "but less text")
}
