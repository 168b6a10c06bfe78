package app_test

import (
	"bytes"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/app"
)

// TestHubFlags: hosts from a flag or the environment, tokens from the
// environment and a file; the settings logged name the hosts that have
// tokens, never a token, and a malformed entry is reported by position.
func TestHubFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("# mirror\nmirror.internal:8443 = tok-from-file\n"), 0o600))
	t.Setenv(app.EnvRefHosts, "huggingface.co, mirror.internal:8443")
	t.Setenv(app.EnvRefTokens, "Example.com=tok-from-env")
	t.Setenv(app.EnvHFToken, "hf_from_env")
	t.Setenv(app.EnvRefTokensFile, file)

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	build := app.HubFlags(fs)
	require.NoError(t, fs.Parse(nil))
	var logs bytes.Buffer
	o, err := build(slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.Equal(t, []string{"huggingface.co", "mirror.internal:8443"}, o.Hosts)
	require.Equal(t, map[string]string{"huggingface.co": "hf_from_env", "example.com": "tok-from-env", "mirror.internal:8443": "tok-from-file"}, o.Tokens)
	require.Contains(t, logs.String(), "tokens_for=")
	for _, tok := range []string{"hf_from_env", "tok-from-env", "tok-from-file"} {
		require.NotContains(t, logs.String(), tok)
	}

	require.NoError(t, os.WriteFile(file, []byte("mirror.internal:8443 tok-without-equals\n"), 0o600))
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	build = app.HubFlags(fs)
	require.NoError(t, fs.Parse([]string{"--ref-hosts", "127.0.0.1:9"}))
	o, err = build(nil)
	require.ErrorIs(t, err, app.ErrConfig)
	require.Contains(t, err.Error(), "entry 1 is not host=token")
	require.NotContains(t, err.Error(), "tok-without-equals")
	require.Equal(t, []string{"127.0.0.1:9"}, o.Hosts, "the flag wins over the environment")
}
