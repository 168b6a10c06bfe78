package engine

import (
	"regexp"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Phases of an engine's start-up, for an OOM: the step it was in when
// memory ran out.
const (
	PhaseWeights   = "weights_loading"
	PhaseCUDAGraph = "cuda_graph_capture"
	PhaseKVCache   = "kv_cache_allocation"
	PhaseServing   = "serving"
)

// The classes, in order: the first whose pattern a log line matches names
// the failure, so the more specific come first. Out of memory comes first
// because NCCL and CUDA errors are often its symptom ("NCCL error ... Cuda
// failure 'out of memory'"); an engine that refused its flags, its context
// length or its KV dtype dies with a traceback too, and that line, not the
// traceback (engine_crashed), names the failure. An argparse refusal of
// --quantization or --kv-cache-dtype stays engine_unsupported_quantization
// (that class comes before engine_bad_flags). Every pattern is the wording
// the engines print (vLLM's and SGLang's sources, PyTorch's and CPython's
// messages), quoted in classify_test.go with where each comes from.
var classes = []struct {
	code reason.Code
	re   *regexp.Regexp
}{
	{reason.EngineOOM, regexp.MustCompile(`(?i)out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|No available memory for the cache blocks|KV cache is needed, which is larger than the available KV cache memory|Not enough memory\. Please try to increase --mem-fraction-static|Free memory on device \S*\s*\([0-9.]+/[0-9.]+ GiB\) on startup is less than desired GPU memory utilization`)},
	{reason.EnginePortInUse, regexp.MustCompile(`(?i)address already in use|EADDRINUSE`)},
	{reason.EngineUnsupportedQuantization, regexp.MustCompile(`(?i)quantization method \S+ is not supported for the current GPU|Unknown quantization method|Quantization scheme is not supported|argument --quantization: invalid choice|argument --kv-cache-dtype: invalid choice`)},
	{reason.EngineBadFlags, regexp.MustCompile(`error: unrecognized arguments: |error: argument \S+: invalid choice: |error: argument \S+: invalid \S+ value: |error: argument \S+: expected (?:one|at least one|\d+) argument|error: the following arguments are required: `)},
	{reason.EngineContextTooLong, regexp.MustCompile(`User-specified max_model_len \(\d+\) is greater than the derived max_model_len|User-specified context_length \(\d+\) is greater than the derived context_length \(\d+\)\..*SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`)},
	{reason.EngineKVDTypeUnsupportedOnGPU, regexp.MustCompile(`No valid attention backend found for \S+ with .*\bkv_cache_dtype[=:] ?\w*fp4`)},
	{reason.EngineBadCheckpoint, regexp.MustCompile(`(?i)SafetensorError|safetensors:|Error while deserializing header|invalid checkpoint|Error loading model|HeaderTooLarge|Following weights were not initialized from checkpoint`)},
	{reason.EngineNCCLError, regexp.MustCompile(`NCCL error|DistBackendError|ncclUnhandledCudaError|ncclSystemError|ncclInternalError`)},
}

// logLevel matches a line a logger wrote below ERROR (vLLM's "INFO 08-19
// 07:51:12 ...", uvicorn's "INFO:     ..."): such lines give advice ("If
// you are running out of memory, consider decreasing
// `gpu_memory_utilization`") and never name the failure. A level word
// inside a message ("NCCL_DEBUG=INFO") is not one.
var logLevel = regexp.MustCompile(`(?:^|[\s)\]])(?:INFO|WARNING|WARN|DEBUG)(?:\s+\d\d-\d\d|:)`)

// phaseMarks are lines that show where a start-up is: the last one at or
// before the out-of-memory line is its phase. Python prints a traceback
// outermost frame first, so the innermost (the most precise) comes last.
var phaseMarks = []struct {
	phase string
	re    *regexp.Regexp
}{
	{PhaseWeights, regexp.MustCompile(`(?i)load_weights|load_model|Loading safetensors checkpoint shards|Load weight begin|create_weights|weight_loader|Loading weights`)},
	{PhaseKVCache, regexp.MustCompile(`(?i)No available memory for the cache blocks|KV cache is needed|determine_available_memory|_initialize_kv_caches|initialize_kv_cache|profile_max_num_token|init_memory_pool|Not enough memory\. Please try to increase --mem-fraction-static|KV Cache is allocated|on startup is less than desired GPU memory utilization`)},
	{PhaseCUDAGraph, regexp.MustCompile(`(?i)cuda_graph|capture_one|capture_model|capture_end|Capturing (?:batches|CUDA graph|cudagraphs)|Capture cuda graph|Capturing the model for CUDA graphs`)},
	{PhaseServing, regexp.MustCompile(`(?i)Application startup complete|"POST /v1/|Decode batch|Avg prompt throughput`)},
}

// Classify names why an engine failed from its log tail: the code of one
// of the classes above (reason.EngineCrashed when no class matches) and,
// for an out of memory, the phase it happened in ("" when the log does not
// show it).
func Classify(logTail string) (code reason.Code, phase string) {
	lines := strings.Split(logTail, "\n")
	for _, c := range classes {
		at := -1
		for i, l := range lines {
			if c.re.MatchString(l) && !logLevel.MatchString(l) {
				at = i
			}
		}
		if at < 0 {
			continue
		}
		if c.code == reason.EngineOOM {
			phase = phaseAt(lines, at)
		}
		return c.code, phase
	}
	return reason.EngineCrashed, ""
}

// phaseAt is the phase of the last marker at or before line at.
func phaseAt(lines []string, at int) string {
	for i := at; i >= 0; i-- {
		for _, m := range phaseMarks {
			if m.re.MatchString(lines[i]) {
				return m.phase
			}
		}
	}
	return ""
}
