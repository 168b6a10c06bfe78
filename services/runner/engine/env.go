package engine

import "strings"

// DefaultEnvAllow is the runner's environment an engine inherits: the
// names (or, ending in "*", the prefixes) a CUDA inference engine and the
// Python beneath it read, and nothing else. The engine loads participants'
// checkpoints (code that may run in it: trust_remote_code, pickles) and its
// log goes into public events and records, so the runner's own secrets
// stay with the runner: its NATS nkey seed, the store URL with its
// password, hub tokens.
//
// The list follows what the engines read: vllm/envs.py (vllm-project/vllm
// @001f69f; the index holds no copy at the pinned 35d5cda): VLLM_*,
// CUDA_VISIBLE_DEVICES, CUDA_HOME, LOCAL_RANK, LD_LIBRARY_PATH,
// XDG_CACHE_HOME and XDG_CONFIG_HOME (where VLLM_CACHE_ROOT and
// VLLM_CONFIG_ROOT default), DO_NOT_TRACK (VLLM_DO_NOT_TRACK's fallback);
// SGLang's python/sglang/srt/environ.py (SGLANG_*); Triton's TRITON_*;
// PyTorch's
// TORCH_*, PYTORCH_* and TORCHINDUCTOR_* (the inductor's cache); the
// Hugging Face libraries' HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE,
// HF_HUB_DISABLE_TELEMETRY, HF_HUB_ENABLE_HF_TRANSFER, HF_DATASETS_OFFLINE,
// TRANSFORMERS_OFFLINE, TRANSFORMERS_CACHE; the CUDA driver's and NCCL's
// CUDA_*, NVIDIA_*, NCCL_*; FlashInfer's FLASHINFER_*; the C runtimes'
// OMP_NUM_THREADS, MKL_*; Python's PYTHONPATH, PYTHONUNBUFFERED,
// PYTHONHASHSEED and the interpreter's environment (VIRTUAL_ENV,
// CONDA_PREFIX); and the process basics (PATH, HOME, USER, LOGNAME, LANG,
// LANGUAGE, LC_*, TZ, TMPDIR). Credentials that vLLM reads (VLLM_API_KEY,
// S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, HF_TOKEN) are denied whatever
// allows them (see Environ).
var DefaultEnvAllow = []string{
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
	"LD_LIBRARY_PATH", "CUDA_*", "NVIDIA_*", "NCCL_*", "LOCAL_RANK",
	"HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_ENABLE_HF_TRANSFER",
	"HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE",
	"XDG_CACHE_HOME", "XDG_CONFIG_HOME", "DO_NOT_TRACK",
	"TORCH_*", "PYTORCH_*", "TORCHINDUCTOR_*", "TRITON_*", "VLLM_*", "SGLANG_*", "FLASHINFER_*",
	"OMP_NUM_THREADS", "MKL_*",
	"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX",
}

// deniedPrefixes and deniedParts are the names no engine is given: the
// arena's own settings and the NATS client's, and anything that reads as a
// credential. They win over every allow (the defaults, the operator's
// additions and the runner's own Options.Env).
var (
	deniedPrefixes = []string{"LOWBARENA_", "NATS_"}
	deniedParts    = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "NKEY", "ACCESS_KEY", "KEY_ID"}
)

// EnvDenied reports whether name is never passed to an engine: a
// LOWBARENA_* or NATS_* name, or one that holds TOKEN, SECRET, PASSWORD,
// PASSWD, CREDENTIAL, NKEY, ACCESS_KEY or KEY_ID, or ends in KEY
// (VLLM_API_KEY, OPENAI_API_KEY), in any case.
func EnvDenied(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range deniedPrefixes {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	for _, p := range deniedParts {
		if strings.Contains(up, p) {
			return true
		}
	}
	return strings.HasSuffix(up, "KEY")
}

// envAllowed reports whether name is one of allow's entries: a name, or a
// prefix written "PREFIX_*".
func envAllowed(name string, allow []string) bool {
	for _, a := range allow {
		if p, ok := strings.CutSuffix(a, "*"); ok {
			if p != "" && strings.HasPrefix(name, p) {
				return true
			}
			continue
		}
		if a == name {
			return true
		}
	}
	return false
}

// Environ builds an engine's environment: the entries of parent (the
// runner's, "NAME=value") whose names DefaultEnvAllow or allow (the
// operator's additions, "NAME" or "PREFIX_*") name, then extra (the
// runner's own additions, such as CUDA_VISIBLE_DEVICES), which replace a
// parent entry of the same name. A denied name (EnvDenied) is dropped
// wherever it comes from, extra included; so are entries without "=".
func Environ(parent, allow, extra []string) []string {
	type entry struct{ name, kv string }
	var out []entry
	index := map[string]int{}
	add := func(kv string, check bool) {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || EnvDenied(name) {
			return
		}
		if check && !envAllowed(name, DefaultEnvAllow) && !envAllowed(name, allow) {
			return
		}
		if i, seen := index[name]; seen {
			out[i].kv = kv
			return
		}
		index[name] = len(out)
		out = append(out, entry{name, kv})
	}
	for _, kv := range parent {
		add(kv, true)
	}
	for _, kv := range extra {
		add(kv, false)
	}
	env := make([]string, len(out))
	for i, e := range out {
		env[i] = e.kv
	}
	return env
}
