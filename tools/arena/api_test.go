package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewAPIClient(t *testing.T) {
	tests := []struct {
		url, token, err string
	}{
		{"http://127.0.0.1:8080", "lbp_x", ""},
		{"https://arena.example.org/", "lbp_x", ""},
		{"127.0.0.1:8080", "lbp_x", "want the gateway's base URL"},
		{"ftp://arena.example.org", "lbp_x", "want the gateway's base URL"},
		{"https://user:pass@arena.example.org", "lbp_x", "without credentials"},
		{"https://arena.example.org/?token=x", "lbp_x", "want the gateway's base URL"},
		{"https://arena.example.org", "", "takes a participant's token in LOWBARENA_TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			c, err := newAPIClient(tt.url, tt.token)
			if tt.err == "" {
				require.NoError(t, err)
				require.NotContains(t, c.base.String(), "//arena.example.org/", "no trailing slash")
				return
			}
			require.ErrorContains(t, err, tt.err)
			var ee *exitError
			require.True(t, errors.As(err, &ee))
			require.Equal(t, exitUsage, ee.code)
			require.NotContains(t, err.Error(), "pass@", "credentials are not echoed")
		})
	}
}
