package safetensors_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// shard writes a sparse shard holding the named U8 tensors of 4 bytes each.
func shard(t *testing.T, dir, name string, tensors ...string) {
	t.Helper()
	var w safetensors.Writer
	for _, n := range tensors {
		w.MustAdd(n, safetensors.U8, []int64{4}, nil)
	}
	_, err := w.WriteFile(filepath.Join(dir, name))
	require.NoError(t, err)
}

func index(t testing.TB, dir string, weightMap map[string]string) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 16}, "weight_map": weightMap})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFile), data, 0o600))
}

func TestReadCheckpointSharded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shard(t, dir, "model-00001-of-00002.safetensors", "a", "b")
	shard(t, dir, "model-00002-of-00002.safetensors", "c")
	shard(t, dir, "stray.safetensors", "z")
	index(t, dir, map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})

	c, err := safetensors.ReadCheckpoint(dir)
	require.NoError(t, err)
	require.Len(t, c.Files, 2)
	require.Equal(t, []string{"stray.safetensors"}, c.Unindexed)
	require.Len(t, c.Tensors(), 3)
	loc, ok := c.Tensor("c")
	require.True(t, ok)
	require.Equal(t, "model-00002-of-00002.safetensors", loc.File)
	require.Equal(t, int64(12), c.TensorBytes())
	require.Equal(t, c.Files[0].Size+c.Files[1].Size, c.FileBytes())
	require.Equal(t, c.Files[0].Header.BytesRead+c.Files[1].Header.BytesRead, c.BytesRead())
	require.Equal(t, float64(16), c.Index.Metadata["total_size"])
}

func TestReadCheckpointSingle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shard(t, dir, "model.safetensors", "a")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o600))
	c, err := safetensors.ReadCheckpoint(dir)
	require.NoError(t, err)
	require.Nil(t, c.Index)
	require.Len(t, c.Files, 1)
}

func TestReadCheckpointRefuses(t *testing.T) {
	t.Parallel()
	const s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		code  safetensors.Code
	}{
		{"no safetensors", func(t *testing.T, dir string) {}, reason.NoSafetensors},
		{"missing shard", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a")
			index(t, dir, map[string]string{"a": s1, "b": s2})
		}, reason.IndexShardMissing},
		{"tensor in the other shard", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a")
			shard(t, dir, s2, "b")
			index(t, dir, map[string]string{"a": s2, "b": s1})
		}, reason.IndexTensorMisplaced},
		{"tensor in no shard", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a")
			index(t, dir, map[string]string{"a": s1, "ghost": s1})
		}, reason.IndexTensorMisplaced},
		{"tensor not in the index", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a", "hidden")
			index(t, dir, map[string]string{"a": s1})
		}, reason.IndexTensorUnlisted},
		{"tensor in two shards", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a")
			shard(t, dir, s2, "a")
		}, reason.TensorDuplicate},
		{"path traversal in a shard name", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a")
			index(t, dir, map[string]string{"a": "../" + s1})
		}, reason.IndexShardInvalidName},
		{"absolute shard name", func(t *testing.T, dir string) {
			index(t, dir, map[string]string{"a": "/etc/passwd.safetensors"})
		}, reason.IndexShardInvalidName},
		{"shard name not safetensors", func(t *testing.T, dir string) {
			index(t, dir, map[string]string{"a": "config.json"})
		}, reason.IndexShardInvalidName},
		{"index not JSON", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFile), []byte(`{`), 0o600))
		}, reason.IndexInvalid},
		{"index without weight_map", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFile), []byte(`{"metadata":{}}`), 0o600))
		}, reason.IndexInvalid},
		{"index duplicate tensor", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFile), []byte(`{"weight_map":{"a":"`+s1+`","a":"`+s2+`"}}`), 0o600))
		}, reason.TensorDuplicate},
		{"shard truncated", func(t *testing.T, dir string) {
			shard(t, dir, s1, "a", "b")
			path := filepath.Join(dir, s1)
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(path, st.Size()-1))
		}, reason.FileTruncated},
		{"shard is a symlink out of the folder", func(t *testing.T, dir string) {
			outside := t.TempDir()
			shard(t, outside, s1, "a")
			require.NoError(t, os.Symlink(filepath.Join(outside, s1), filepath.Join(dir, s1)))
			index(t, dir, map[string]string{"a": s1})
		}, reason.IOError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tt.setup(t, dir)
			c, err := safetensors.ReadCheckpoint(dir)
			require.Nil(t, c)
			require.Equal(t, tt.code, safetensors.CodeOf(err), "%v", err)
		})
	}
}

func TestParseIndexMetadata(t *testing.T) {
	t.Parallel()
	x, err := safetensors.ParseIndex([]byte(`{"metadata":{"total_size":3},"weight_map":{"b":"y.safetensors","a":"x.safetensors","c":"x.safetensors"},"extra":[1]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"x.safetensors", "y.safetensors"}, x.Shards())
}
