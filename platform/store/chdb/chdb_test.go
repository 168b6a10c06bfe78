//go:build !nochdb

package chdbstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
	chdbstore "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/platform/store/storetest"
)

// opener opens chDB stores in dir, one database per test. chDB has one
// session per process, so every store of a run shares dir.
func opener(dir string) storetest.Opener {
	return func(t *testing.T) store.Store {
		t.Helper()
		st, err := store.Open(context.Background(), "chdb://"+dir+"?database="+storetest.DatabaseName(t))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		return st
	}
}

func TestContract(t *testing.T) {
	storetest.Run(t, opener(t.TempDir()))
}

func TestEngine(t *testing.T) {
	st := opener(t.TempDir())(t)
	require.True(t, strings.HasPrefix(st.Engine(), "chdb "), st.Engine())
	require.Regexp(t, `^chdb \d+\.\d+`, st.Engine())
}

// TestPersistence closes the process's chDB session and starts a new one on
// the same folder: the rows written by the first are read by the second.
// chDB allows one session at a time per process, not one per process
// lifetime, so this runs in-process.
func TestPersistence(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "chdb://" + dir + "?database=persist"
	rows := []store.RoundStep{
		{TsMs: 1, RoundID: "r", Step: 1, Name: "one", Detail: "ü"},
		{TsMs: 2, RoundID: "r", Step: 2, Name: "two"},
	}

	st, err := store.Open(ctx, url)
	require.NoError(t, err)
	require.NoError(t, store.Insert(ctx, st, rows))
	require.NoError(t, st.Close())

	st, err = store.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var got []store.RoundStep
	require.NoError(t, st.Select(ctx, &got, "SELECT * FROM round_steps ORDER BY step"))
	require.Equal(t, rows, got)
	applied, err := store.Migrate(ctx, st)
	require.NoError(t, err)
	require.Empty(t, applied)
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		name    string
		url     string
		wantErr string
	}{
		{"relative path", "chdb://relative/dir", "absolute"},
		{"opaque", "chdb:relative", "absolute"},
		{"bad database", "chdb://" + dir + "?database=no-dashes", "database"},
		{"unknown parameter", "chdb://" + dir + "?color=red", "unknown URL parameter"},
		{"query characters in path", "chdb://" + dir + "/a%3Fb", "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := store.Open(ctx, tt.url)
			require.ErrorContains(t, err, tt.wantErr)
			require.Nil(t, st)
		})
	}

	t.Run("two paths at once", func(t *testing.T) {
		a, err := store.Open(ctx, "chdb://"+dir+"/a")
		require.NoError(t, err)
		defer a.Close()
		b, err := store.Open(ctx, "chdb://"+dir+"/b")
		require.ErrorIs(t, err, chdbstore.ErrOtherPath)
		require.Nil(t, b)
		// Another database on the same path shares the session.
		c, err := store.Open(ctx, "chdb://"+dir+"/a?database=other")
		require.NoError(t, err)
		require.NoError(t, c.Close())
		var n []struct {
			N uint64 `ch:"n"`
		}
		require.NoError(t, a.Select(ctx, &n, "SELECT count() AS n FROM gpu_samples"), "closing one store leaves the session to the others")
	})
}

func BenchmarkInsertGPUSamples(b *testing.B) {
	st, err := store.Open(context.Background(), "chdb://"+b.TempDir())
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	storetest.BenchInsertGPUSamples(b, st)
}
