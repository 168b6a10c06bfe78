package chstore

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url  string
		want config
	}{
		{"clickhouse://h", config{addr: "h:9000", user: "default", db: DefaultDatabase, dialTimeout: 10 * time.Second}},
		{"clickhouse://u:p%40ss@h:9440/arena", config{addr: "h:9440", user: "u", password: "p@ss", db: "arena", dialTimeout: 10 * time.Second}},
		{"clickhouse://u@[::1]:9001/", config{addr: "[::1]:9001", user: "u", db: DefaultDatabase, dialTimeout: 10 * time.Second}},
		{"clickhouse://h/db?dial_timeout=250ms", config{addr: "h:9000", user: "default", db: "db", dialTimeout: 250 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			got, err := parseURL(u)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	for _, bad := range []string{"http://h/db", "clickhouse:///db", "clickhouse://h/a/b", "clickhouse://h/db?dial_timeout=-1s", "clickhouse://h/db?x=1"} {
		t.Run(bad, func(t *testing.T) {
			u, err := url.Parse(bad)
			require.NoError(t, err)
			_, err = parseURL(u)
			require.ErrorIs(t, err, ErrURL)
		})
	}
}
