package campaign_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
)

const (
	meta    = `{"task_id":"tiny","name":"a tiny model","family":"qwen3","policy":{"allow_sparse":false,"foreign_share_limit":0.002}}`
	config  = `{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","rope_theta":1000000}`
	tensors = `{"tensors":{"model.embed_tokens.weight":{"dtype":"BF16","shape":[16,8]},"lm_head.weight":{"dtype":"BF16","shape":[16,8]}}}`
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
}

func good() map[string]string {
	return map[string]string{campaign.File: meta, campaign.ConfigFile: config, campaign.TensorsFile: tensors}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write(t, filepath.Join(root, "tiny"), good())
	write(t, filepath.Join(root, "notes"), map[string]string{"README.md": "not a campaign"})
	set, err := campaign.LoadDir(root)
	require.NoError(t, err)
	require.Equal(t, []string{"tiny"}, set.Tasks())
	c, err := set.Lookup("tiny")
	require.NoError(t, err)
	require.Equal(t, "a tiny model", c.Name)
	require.Equal(t, 0.002, c.Policy.Analyze().ForeignShareLimit)
	require.Len(t, c.Source.Tensors.Tensors, 2)
	require.JSONEq(t, config, string(c.Source.Config))

	_, err = set.Lookup("llama")
	require.ErrorIs(t, err, campaign.ErrUnknownTask)
	require.Contains(t, err.Error(), "this arena runs tiny")
}

func TestLoadRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(map[string]string)
		want   string
	}{
		{"unknown field", func(m map[string]string) { m[campaign.File] = `{"task_id":"tiny","polcy":{}}` }, "unknown field"},
		{"bad task id", func(m map[string]string) { m[campaign.File] = `{"task_id":"../x"}` }, "task_id"},
		{"share out of range", func(m map[string]string) { m[campaign.File] = `{"task_id":"tiny","policy":{"foreign_share_limit":2}}` }, "foreign_share_limit"},
		{"config not JSON", func(m map[string]string) { m[campaign.ConfigFile] = `{` }, "not valid JSON"},
		{"no tensors file", func(m map[string]string) { delete(m, campaign.TensorsFile) }, "tensors.json"},
		{"unknown dtype", func(m map[string]string) {
			m[campaign.TensorsFile] = `{"tensors":{"w":{"dtype":"Q4_K","shape":[2]}}}`
		}, "unknown dtype"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := good()
			tc.change(files)
			dir := filepath.Join(t.TempDir(), "tiny")
			write(t, dir, files)
			_, err := campaign.Load(dir)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestLoadDirRefuses(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	_, err := campaign.LoadDir(root)
	require.ErrorContains(t, err, "holds no campaign")
	write(t, filepath.Join(root, "a"), good())
	write(t, filepath.Join(root, "b"), good())
	_, err = campaign.LoadDir(root)
	require.ErrorContains(t, err, "two campaigns run task tiny")
}

func TestCheckReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string // in the reference folder; nil: no folder
		want  string            // "" when the reference holds weights
	}{
		{"weights", map[string]string{"config.json": config, "model.safetensors": "x"}, ""},
		{"sharded weights", map[string]string{"model-00001-of-00002.safetensors": "x", "model-00002-of-00002.safetensors": "x"}, ""},
		{"no folder", nil, "does not exist"},
		{"a folder without weights", map[string]string{"config.json": config, "README.md": "weights to come"}, "no *.safetensors in"},
		{"pickled weights only", map[string]string{"pytorch_model.bin": "x"}, "no *.safetensors in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "tiny"), good())
			if tc.files != nil {
				write(t, filepath.Join(root, "tiny", "reference"), tc.files)
			}
			set, err := campaign.LoadDir(root)
			require.NoError(t, err)
			c, err := set.Lookup("tiny")
			require.NoError(t, err)
			err = c.CheckReference()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, campaign.ErrNoReference)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "campaign tiny has no BF16 reference checkpoint")
		})
	}
}
