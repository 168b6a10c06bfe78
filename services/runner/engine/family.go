package engine

import (
	"path/filepath"
	"strings"
	"time"
)

// Family is a kind of engine the runner knows: where it answers health
// and where it serves its Prometheus metrics. The runner reads every
// engine's start-up lines, failures and metrics the same way (each
// engine's own lines and metric names identify it); only the health
// endpoint depends on the family.
type Family struct {
	// Name is "vllm", "sglang", "simengine" or "openai" (any other
	// OpenAI-compatible server).
	Name string
	// HealthPath answers 200 once the engine can serve.
	HealthPath string
	// MetricsPath serves Prometheus text exposition ("" when the
	// family serves none).
	MetricsPath string
	// ProbeTimeout bounds one health probe (Options.ProbeTimeout's
	// default).
	ProbeTimeout time.Duration
}

// The families. vLLM's /health answers 200 once its engine core is up (its
// HTTP server listens only then). SGLang serves /health and
// /health_generate: both answer 503 while the server is starting, and
// /health_generate then runs a one-token generation, so a 200 from it
// means the engine has generated (python/sglang/srt/entrypoints/
// http_server.py). SGLang serves /metrics only with --enable-metrics.
// Its health handler polls for that generation's end once a second
// (asyncio.sleep(1), http_server.py@0025436), so one probe takes a second
// or more: SGLang's probes get 5 s, the others' 2 s.
var (
	FamilyVLLM      = Family{Name: "vllm", HealthPath: "/health", MetricsPath: "/metrics", ProbeTimeout: 2 * time.Second}
	FamilySGLang    = Family{Name: "sglang", HealthPath: "/health_generate", MetricsPath: "/metrics", ProbeTimeout: 5 * time.Second}
	FamilySimengine = Family{Name: "simengine", HealthPath: "/health", MetricsPath: "/metrics", ProbeTimeout: 2 * time.Second}
	FamilyOpenAI    = Family{Name: "openai", HealthPath: "/health", MetricsPath: "/metrics", ProbeTimeout: 2 * time.Second}
)

// Detect names the family of a rendered command: `vllm serve ...` or
// `python -m vllm.entrypoints.openai.api_server ...` is vLLM;
// `python -m sglang.launch_server ...` or `sglang serve ...` is SGLang;
// simengine is itself unless it runs with `--imitate vllm|sglang`, when
// it stands for that engine (same health endpoint, metric names and log
// lines); anything else is a plain OpenAI-compatible server.
func Detect(argv []string) Family {
	for i, w := range argv {
		base := filepath.Base(w)
		next := ""
		if i+1 < len(argv) {
			next = argv[i+1]
		}
		switch {
		case strings.HasPrefix(w, "vllm.entrypoints"), base == "vllm" && next == "serve":
			return FamilyVLLM
		case strings.HasPrefix(w, "sglang.launch_server"), base == "sglang" && next == "serve":
			return FamilySGLang
		}
	}
	if len(argv) > 0 && filepath.Base(argv[0]) == "simengine" {
		for i, w := range argv {
			v, ok := strings.CutPrefix(w, "--imitate=")
			if !ok && w == "--imitate" && i+1 < len(argv) {
				v, ok = argv[i+1], true
			}
			if ok {
				switch v {
				case "vllm":
					return FamilyVLLM
				case "sglang":
					return FamilySGLang
				}
			}
		}
		return FamilySimengine
	}
	return FamilyOpenAI
}
