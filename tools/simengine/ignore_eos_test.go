package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIgnoreEOS: an eval item's reply ends it (finish stop) unless
// ignore_eos asks for max_tokens, as vLLM does. (The cheats are real
// patches of this source, see TestPinnedEnginePatches.)
func TestIgnoreEOS(t *testing.T) {
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
}
