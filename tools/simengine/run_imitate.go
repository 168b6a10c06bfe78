package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// imitateOptions are simengine's own flags in imitate mode.
type imitateOptions struct {
	Engine, GPU, SourceConfig, Fault string
	Scale, KVScale                   float64
	StartupSeconds, OverheadMS       float64
	Seed                             int64
	ArenaEndpoints                   bool
}

// runImitate is the process in imitate mode: the engine's argv read as
// the engine reads it, its start-up phases on the simulated device, then
// serving until SIGTERM. It returns the exit status: 2 for a command line
// the engine's argparse (or simengine) refuses, 1 for an engine that
// refuses to start, 0 after a clean shutdown.
func runImitate(o imitateOptions, engineArgv []string, stderr io.Writer) int { //nolint:gocyclo // a main: its checks, then each start-up step with its exit status, read top to bottom
	logger := log.New(stderr, "", 0)
	simf := func(format string, a ...any) { logger.Printf("simengine: "+format, a...) }
	if o.Engine != "vllm" && o.Engine != "sglang" {
		simf("unknown --imitate %q (vllm or sglang)", o.Engine)
		return 2
	}
	if len(engineArgv) == 0 {
		simf("--imitate %s needs the engine's command line after --, e.g. `simengine --imitate vllm -- vllm serve /ck --port 8000`", o.Engine)
		return 2
	}
	ea, err := ParseEngineArgv(o.Engine, engineArgv)
	var argErr *ArgError
	if errors.As(err, &argErr) {
		logger.Print(argErr.Error())
		return 2
	}
	if err != nil {
		simf("%v", err)
		return 2
	}
	gpu, ok := GPUs[o.GPU]
	if !ok {
		simf("unknown --gpu %q", o.GPU)
		return 2
	}
	fault, err := ParseFault(o.Fault)
	if err != nil {
		simf("%v", err)
		return 2
	}
	m, err := LoadCheckpoint(ea.Model)
	if err != nil {
		simf("%v", err)
		return 1
	}
	cfg, weights := m.Config, m.Weights
	scale, kvScale := max(o.Scale, 0), o.KVScale
	if scale == 0 {
		scale = 1
	}
	if kvScale <= 0 {
		kvScale = scale
	}
	weights.Bytes *= scale
	weights.Params *= scale
	if o.SourceConfig != "" {
		full, err := ReadSourceArch(o.SourceConfig)
		if err != nil {
			simf("--source-config: %v", err)
			return 2
		}
		fsz, err := FullSizeOf(ea.Model, m, full)
		if err != nil {
			simf("%v", err)
			return 1
		}
		weights, kvScale = fsz.Weights, 1
		cfg = ModelConfig{Layers: full.Layers, KVHeads: full.KVHeads, Heads: full.Heads, HeadDim: full.HeadDim, Hidden: full.Hidden, MaxPos: full.MaxPos,
			KVLoraRank: full.KVLoraRank, QKRopeHeadDim: full.QKRopeHeadDim, Architectures: m.Config.Architectures}
	}
	im := Imitate(ImitateInput{GPU: gpu, Config: cfg, Weights: weights, Args: ea, Startup: o.StartupSeconds,
		StepOverhead: time.Duration(o.OverheadMS * float64(time.Millisecond)), KVScale: kvScale})

	elog := EngineLogger{Engine: o.Engine, Pid: os.Getpid(), Write: func(s string) { logger.Print(s) }}
	dev := &Device{GPU: gpu, Total: gpu.NVMLBytes}
	sched := NewScheduler(im.Plan, max(im.MaxSeqs, 1))
	switch fault.Kind {
	case "hang-after-tokens":
		sched.Hang, sched.HangAfter = true, fault.N
	case "die-after-tokens":
		sched.DieAfter = max(fault.N, 1)
		sched.OnDie = func() {
			elog.Log(EngineLine{Proc: "core", Level: "ERROR", Src: "core.py:866", Text: "RuntimeError: CUDA error: an illegal memory access was encountered"})
			os.Exit(1)
		}
	}
	toks, _ := LoadTokens(ea.Model)
	srv := &Server{Plan: im.Plan, Sched: sched, Fault: fault, ModelID: m.Name, StartupSeconds: o.StartupSeconds, Seed: o.Seed,
		Damage: Damage(m.Checkpoint, im.DamageKV), Imitate: o.Engine, NoArenaEndpoints: !o.ArenaEndpoints, Tokens: toks,
		ServedName: im.ServedName, Engine: &im, Device: dev}
	if o.Engine == "sglang" {
		gauges := &CadenceGauges{Interval: im.DecodeLogInterval, PoolTokens: im.Plan.KVTokens(),
			Log: func(s string) { elog.Log(EngineLine{Level: "INFO", Text: s}) }}
		sched.OnStep = func(si StepInfo) { gauges.Observe(si) }
		srv.Gauges, srv.MetricsOff = gauges, !im.EnableMetrics
	}

	// The port is served from the start: health answers 503 and the
	// device endpoint follows the start-up.
	addr := net.JoinHostPort(im.Host, strconv.Itoa(im.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		simf("listen: %v", err)
		return 1
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	schedCtx, schedCancel := context.WithCancel(context.Background())
	defer schedCancel()
	shutdown := func() int {
		schedCancel()
		sctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		if err := httpSrv.Shutdown(sctx); err != nil {
			_ = httpSrv.Close()
		}
		return 0
	}

	start := time.Now()
	for _, p := range im.Phases {
		t := time.NewTimer(time.Until(start.Add(time.Duration(p.At * o.StartupSeconds * float64(time.Second)))))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return shutdown()
		case err := <-serveErr:
			t.Stop()
			simf("serve: %v", err)
			return 1
		}
		dev.SetUsed(p.Used)
		for _, l := range p.Lines {
			elog.Log(l)
		}
		if p.Fail {
			shutdown()
			return 1
		}
	}
	if fault.Kind == "crash-on-start" {
		elog.Log(EngineLine{Proc: "core", Level: "ERROR", Src: "core.py:866", Text: "EngineCore failed to start. (simulated fault crash-on-start)"})
		shutdown()
		return 1
	}
	go sched.Run(schedCtx)
	srv.SetReady()
	select {
	case err := <-serveErr:
		simf("serve: %v", err)
		return 1
	case <-ctx.Done():
	}
	for _, text := range []string{"INFO:     Shutting down", "INFO:     Waiting for application shutdown.", "INFO:     Application shutdown complete.",
		fmt.Sprintf("INFO:     Finished server process [%d]", os.Getpid())} {
		elog.Log(EngineLine{Proc: "api", Raw: o.Engine == "vllm", Level: "INFO", Text: text})
	}
	return shutdown()
}
