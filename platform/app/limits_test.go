package app

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/bus"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1024", 1024, true},
		{"20GiB", 20 << 30, true},
		{"20GB", 20 << 30, true},
		{"20g", 20 << 30, true},
		{" 512 MiB ", 512 << 20, true},
		{"3T", 3 << 40, true},
		{"7B", 7, true},
		{"1.5GiB", 0, false},
		{"-1", 0, false},
		{"GiB", 0, false},
		{"9999999TiB", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, err := ParseBytes(tc.in)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, n)
			again, err := ParseBytes(FormatBytes(n))
			require.NoError(t, err)
			require.Equal(t, n, again, "FormatBytes writes what ParseBytes reads")
		})
	}
}

// TestLimitsConfig: the JetStream limits come from the environment, a
// flag wins over its variable, and a malformed value or limits that do
// not fit their volume are configuration errors.
func TestLimitsConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    bus.Limits
		problem string
	}{
		{"none: the defaults", nil, nil, bus.Limits{}, ""},
		{"from the environment", map[string]string{EnvJSVolume: "200GiB", EnvJSUploadsMaxAge: "72h", EnvJSArtifactsMaxBytes: "100G"}, nil,
			bus.Limits{Volume: 200 << 30, UploadsMaxAge: 72 * time.Hour, ArtifactsMaxBytes: 100 << 30}, ""},
		{"a flag wins", map[string]string{EnvJSVolume: "200GiB"}, []string{"--js-volume", "50GiB", "--js-uploads-max-bytes", "10GiB", "--js-arena-max-bytes", "5GiB"},
			bus.Limits{Volume: 50 << 30, UploadsMaxBytes: 10 << 30, ArenaMaxBytes: 5 << 30}, ""},
		{"a malformed size", map[string]string{EnvJSVolume: "lots"}, nil, bus.Limits{Volume: -1}, "js-volume: not a size"},
		{"a malformed age", map[string]string{EnvJSUploadsMaxAge: "a week"}, nil, bus.Limits{UploadsMaxAge: -1}, "js-uploads-max-age"},
		{"more than the volume", nil, []string{"--js-volume", "10GiB", "--js-artifacts-max-bytes", "12GiB"},
			bus.Limits{Volume: 10 << 30, ArtifactsMaxBytes: 12 << 30}, "do not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{EnvJSVolume, EnvJSArenaMaxBytes, EnvJSUploadsMaxBytes, EnvJSUploadsMaxAge, EnvJSArtifactsMaxBytes} {
				t.Setenv(k, tc.env[k])
			}
			c := DefaultConfig("test")
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.RegisterFlags(fs)
			require.NoError(t, fs.Parse(tc.args))
			require.Equal(t, tc.want, c.Limits)
			require.Equal(t, tc.want, c.Topology().Limits)
			err := c.Validate()
			if tc.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.problem)
		})
	}
}
