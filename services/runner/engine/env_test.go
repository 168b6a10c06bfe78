package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/engine"
)

func TestEnviron(t *testing.T) {
	t.Parallel()
	parent := []string{
		"PATH=/usr/bin", "HOME=/root", "LC_ALL=C.UTF-8", "CUDA_HOME=/usr/local/cuda",
		"NVIDIA_VISIBLE_DEVICES=all", "NCCL_DEBUG=INFO", "VLLM_LOGGING_LEVEL=DEBUG",
		"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "HF_HOME=/cache/hf", "PYTHONUNBUFFERED=1",
		"LOWBARENA_REF_TOKENS=hub=t", "LOWBARENA_NATS_NKEY=SUA", "LOWBARENA_STORE=clickhouse://u:p@h/db",
		"NATS_URL=nats://h", "HF_TOKEN=hf_x", "HUGGING_FACE_HUB_TOKEN=hf_y", "VLLM_API_KEY=k",
		"S3_ACCESS_KEY_ID=AK", "S3_SECRET_ACCESS_KEY=SK", "GITHUB_TOKEN=g", "AWS_SECRET_ACCESS_KEY=a",
		"VLLM_CREDENTIALS_FILE=/c", "DB_PASSWD=p", "OPENAI_API_KEY=o", "VLLM_SIGNING_KEY=s",
		"EDITOR=vi", "noequals", "=novalue",
	}
	for _, tc := range []struct {
		name         string
		allow, extra []string
		want         []string
	}{
		{"defaults", nil, nil, []string{
			"PATH=/usr/bin", "HOME=/root", "LC_ALL=C.UTF-8", "CUDA_HOME=/usr/local/cuda",
			"NVIDIA_VISIBLE_DEVICES=all", "NCCL_DEBUG=INFO", "VLLM_LOGGING_LEVEL=DEBUG",
			"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "HF_HOME=/cache/hf", "PYTHONUNBUFFERED=1",
		}},
		{"the operator's names and prefixes", []string{"EDITOR", "S3_*"}, nil, []string{
			"PATH=/usr/bin", "HOME=/root", "LC_ALL=C.UTF-8", "CUDA_HOME=/usr/local/cuda",
			"NVIDIA_VISIBLE_DEVICES=all", "NCCL_DEBUG=INFO", "VLLM_LOGGING_LEVEL=DEBUG",
			"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "HF_HOME=/cache/hf", "PYTHONUNBUFFERED=1",
			"EDITOR=vi",
		}},
		{"a deny wins over the operator", []string{"LOWBARENA_*", "NATS_*", "HF_TOKEN", "*", "GITHUB_*", "AWS_*"}, nil, []string{
			"PATH=/usr/bin", "HOME=/root", "LC_ALL=C.UTF-8", "CUDA_HOME=/usr/local/cuda",
			"NVIDIA_VISIBLE_DEVICES=all", "NCCL_DEBUG=INFO", "VLLM_LOGGING_LEVEL=DEBUG",
			"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "HF_HOME=/cache/hf", "PYTHONUNBUFFERED=1",
		}},
		{"the runner's additions replace and add, denied ones are dropped", nil,
			[]string{"PATH=/opt/venv/bin", "CUDA_VISIBLE_DEVICES=GPU-1", "LOWBARENA_X=1", "HF_TOKEN=t", "bad"},
			[]string{
				"PATH=/opt/venv/bin", "HOME=/root", "LC_ALL=C.UTF-8", "CUDA_HOME=/usr/local/cuda",
				"NVIDIA_VISIBLE_DEVICES=all", "NCCL_DEBUG=INFO", "VLLM_LOGGING_LEVEL=DEBUG",
				"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "HF_HOME=/cache/hf", "PYTHONUNBUFFERED=1",
				"CUDA_VISIBLE_DEVICES=GPU-1",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, engine.Environ(parent, tc.allow, tc.extra))
		})
	}
}

func TestEnvDenied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		denied bool
	}{
		{"LOWBARENA_STORE", true}, {"lowbarena_pod", true}, {"NATS_CREDS", true},
		{"HF_TOKEN", true}, {"HUGGING_FACE_HUB_TOKEN", true}, {"VLLM_API_KEY", true},
		{"OPENAI_API_KEY", true}, {"SSH_PRIVATE_KEY", true}, {"MYKEY", true},
		{"S3_ACCESS_KEY_ID", true}, {"AWS_SECRET_ACCESS_KEY", true}, {"DB_PASSWD", true},
		{"GOOGLE_APPLICATION_CREDENTIALS", true}, {"LOWBARENA_NKEY_RUNNER", true}, {"USER_NKEY", true},
		{"PATH", false}, {"CUDA_VISIBLE_DEVICES", false}, {"VLLM_KEYS_DIR", false}, {"HF_HOME", false},
		{"KEYBOARD", false},
	} {
		require.Equal(t, tc.denied, engine.EnvDenied(tc.name), tc.name)
	}
}
