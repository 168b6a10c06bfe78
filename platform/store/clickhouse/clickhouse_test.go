package chstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	chstore "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
	"github.com/lowbarena/lowbarena/platform/store/storetest"
)

// opener opens stores on the server at addr, one database per test.
func opener(addr string) storetest.Opener {
	return func(t *testing.T) store.Store {
		t.Helper()
		st, err := store.Open(context.Background(), "clickhouse://"+addr+"/"+storetest.DatabaseName(t))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		return st
	}
}

func TestContract(t *testing.T) {
	storetest.Run(t, opener(chtest.Start(t)))
}

func TestOpen(t *testing.T) {
	addr := chtest.Start(t)
	ctx := context.Background()

	t.Run("default database", func(t *testing.T) {
		st, err := store.Open(ctx, "clickhouse://default@"+addr)
		require.NoError(t, err)
		defer st.Close()
		require.Equal(t, chstore.DefaultDatabase, st.(*chstore.Store).Database())
		require.Regexp(t, `^clickhouse \d+\.\d+\.\d+$`, st.Engine())
		var rows []struct {
			DB string `ch:"db"`
		}
		require.NoError(t, st.Select(ctx, &rows, "SELECT currentDatabase() AS db"))
		require.Equal(t, chstore.DefaultDatabase, rows[0].DB)
	})

	tests := []struct {
		name    string
		url     string
		wantErr error
	}{
		{"no host", "clickhouse:///db", chstore.ErrURL},
		{"bad database", "clickhouse://" + addr + "/no-dashes", chstore.ErrURL},
		{"unknown parameter", "clickhouse://" + addr + "/db?color=red", chstore.ErrURL},
		{"bad dial timeout", "clickhouse://" + addr + "/db?dial_timeout=soon", chstore.ErrURL},
		{"wrong password", "clickhouse://default:wrong@" + addr + "/db", nil},
		{"nobody listening", "clickhouse://127.0.0.1:1/db?dial_timeout=2s", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := store.Open(ctx, tt.url)
			require.Error(t, err)
			require.Nil(t, st)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
}

func BenchmarkInsertGPUSamples(b *testing.B) {
	st, err := store.Open(context.Background(), "clickhouse://"+chtest.Start(b)+"/bench")
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	storetest.BenchInsertGPUSamples(b, st)
}
