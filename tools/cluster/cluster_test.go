package cluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bins are the binaries TestMain built; examples the folder `arena
// example` wrote.
var (
	bins     Binaries
	examples string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cluster-bin-")
	if err != nil {
		panic(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	if bins, err = Build(context.Background(), root, dir); err != nil {
		panic(err)
	}
	examples = filepath.Join(dir, "examples")
	c := &Cluster{Options: Options{Bin: bins}}
	if _, err := c.Arena(context.Background(), "example", examples); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestSmoke(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	ctx := context.Background()
	start := time.Now()
	c, err := Start(ctx, Options{Root: root, Dir: t.TempDir(), Bin: bins, Campaigns: filepath.Join(examples, "campaigns")})
	require.NoError(t, err)
	defer c.Close()
	t.Logf("cluster up after %s", time.Since(start))
	var ids []string
	for _, b := range []string{"fp8-w8a8", "int4-w4a16-g32", "bf16-declared-w4"} {
		out, err := c.Arena(ctx, "submit", filepath.Join(examples, "submissions", b))
		require.NoError(t, err)
		ids = append(ids, lastWord(out))
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			rec, err := c.Record(ctx, id)
			return err == nil && Ended(rec)
		}, 8*time.Minute, time.Second, id)
		t.Logf("%s ended after %s", id, time.Since(start))
	}
	l, err := c.ReadLedger(ctx)
	require.NoError(t, err)
	require.Empty(t, l.Duplicates())
	require.Empty(t, l.Dead)
	t.Logf("%d events", len(l.Events))
}
