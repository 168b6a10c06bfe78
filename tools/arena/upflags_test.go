//go:build embedded

package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/contract"
	"github.com/lowbarena/lowbarena/services/runner"
)

// TestUpRefFlagsReachTheServices: arena up's --ref-hosts,
// --ref-tokens-file and --ref-idle-timeout (docs/participants/
// by-reference.md) are set on every service that reads repositories
// (build, contract, the runners) as their own flags of the same names;
// left unset, the services keep their own defaults.
func TestUpRefFlagsReachTheServices(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	for _, tc := range []struct {
		args []string
		want map[string]string
	}{
		{args: []string{"--ref-hosts", "hub.example.org", "--ref-tokens-file", tokens, "--ref-idle-timeout", "45s"},
			want: map[string]string{"ref-hosts": "hub.example.org", "ref-tokens-file": tokens, "ref-idle-timeout": "45s"}},
		{args: nil, want: map[string]string{"ref-hosts": "huggingface.co", "ref-tokens-file": "", "ref-idle-timeout": "30s"}},
	} {
		t.Setenv(app.EnvRefHosts, "")
		t.Setenv(app.EnvRefTokensFile, "")
		fs := newFlagSet("up", io.Discard)
		var o upOptions
		o.register(fs)
		_, err := parseFlags(fs, tc.args)
		require.NoError(t, err)
		for _, c := range []app.Component{build.Component(), contract.Component(), runner.Component()} {
			cfg := app.DefaultConfig(c.Name)
			cfs := c.FlagSet(&cfg)
			require.NoError(t, app.Set(cfs, o.settings(t.TempDir(), c.Name, 0)))
			for name, want := range tc.want {
				f := cfs.Lookup(name)
				require.NotNil(t, f, "%s has no --%s", c.Name, name)
				require.Equal(t, want, f.Value.String(), "%s --%s after arena up %v", c.Name, name, tc.args)
			}
		}
	}
}
