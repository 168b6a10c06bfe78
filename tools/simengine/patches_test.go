package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// The example patches against simengine's pinned source, each built
// offline from the tree the example campaign pins and run as a process.

var (
	patchedOnce sync.Once
	patchedDir  string
	patchedBins map[string]string // patch name, or "" for the unpatched tree
	patchedErr  error
)

// pinnedEngines writes the pinned tree, applies each example patch to a
// copy with `patch -p1 --fuzz=0`, and builds every tree offline, two at
// a time, once per test run.
func pinnedEngines(t *testing.T) map[string]string {
	t.Helper()
	patchedOnce.Do(func() { patchedBins, patchedErr = buildPinned() })
	require.NoError(t, patchedErr)
	return patchedBins
}

func buildPinned() (map[string]string, error) {
	var err error
	if patchedDir, err = os.MkdirTemp("", "simengine-patched"); err != nil {
		return nil, err
	}
	patches, err := examples.EnginePatches()
	if err != nil {
		return nil, err
	}
	diffs := map[string][]byte{"": nil}
	for _, p := range patches {
		diffs[p.Name] = p.Diff
	}
	empty := filepath.Join(patchedDir, "empty")
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=vendor", "GOWORK=off", "GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(empty, "mod"), "GOPATH="+filepath.Join(empty, "path"))
	bins := map[string]string{}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for name, diff := range diffs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			label := cmp(name, "unpatched")
			src := filepath.Join(patchedDir, label)
			bin := filepath.Join(patchedDir, "bin", label)
			err := func() error {
				if _, err := examples.WriteEngineSource(src); err != nil {
					return err
				}
				if diff != nil {
					cmd := exec.Command("patch", "-p1", "--fuzz=0", "--quiet")
					cmd.Dir, cmd.Stdin = src, bytes.NewReader(diff)
					if b, err := cmd.CombinedOutput(); err != nil {
						return fmt.Errorf("applying %s: %w: %s", label, err, b)
					}
				}
				args := strings.Fields(strings.ReplaceAll(examples.EngineBuild, "{{.Out}}", bin))
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Dir, cmd.Env = src, env
				if b, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("building %s: %w: %s", label, err, b)
				}
				return nil
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			bins[name] = bin
		})
	}
	wg.Wait()
	return bins, errors.Join(errs...)
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// engineFlags size the tiny checkpoint so that a step's device time
// (its weights over the H200's bandwidth, about 2 ms) is about the step
// overhead (2 ms), and the KV cache stays small.
var engineFlags = []string{"--scale", "195000", "--kv-scale", "1", "--step-overhead-ms", "2"}

// startPinned starts a built engine on the checkpoint and waits for it to
// serve.
func startPinned(t *testing.T, bin, checkpoint string) string {
	t.Helper()
	port := freePort(t)
	args := append([]string{"--checkpoint", checkpoint, "--port", strconv.Itoa(port), "--startup-seconds", "0.1"}, engineFlags...)
	p := &proc{cmd: exec.Command(bin, args...), stderr: &syncBuffer{}, done: make(chan error, 1), url: "http://127.0.0.1:" + strconv.Itoa(port)}
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 10*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())
	return p.url
}

// streamed is one streamed completion's text, its chunk count, its usage
// and how long it took.
type streamed struct {
	text    string
	chunks  int
	usage   int64
	elapsed time.Duration
}

func complete(t *testing.T, url, prompt string, maxTokens int, ignoreEOS bool) streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	resp := post(t, ctx, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": maxTokens, "stream": true,
		"ignore_eos": ignoreEOS, "temperature": 0, "seed": 0, "stream_options": map[string]any{"include_usage": true}})
	require.Equal(t, 200, resp.StatusCode)
	res := readSSE(t, resp.Body, false)
	require.True(t, res.done)
	require.NotNil(t, res.usage)
	return streamed{text: strings.Join(res.content, ""), chunks: len(res.content), usage: res.usage.CompletionTokens, elapsed: time.Since(start)}
}

// unstreamed is the text of one completion asked for without streaming,
// as the quality job asks.
func unstreamed(t *testing.T, url, prompt string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := post(t, ctx, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 16, "temperature": 0, "seed": 0})
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Len(t, out.Choices, 1)
	require.NotEmpty(t, out.Choices[0].Text)
	return out.Choices[0].Text
}

// answerAll streams every prompt, conc at a time, and returns the texts in
// prompt order and the wall time.
func answerAll(t *testing.T, url string, prompts []string, conc, maxTokens int, ignoreEOS bool) ([]string, time.Duration) {
	t.Helper()
	out := make([]string, len(prompts))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range prompts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = complete(t, url, p, maxTokens, ignoreEOS).text
		})
	}
	wg.Wait()
	return out, time.Since(start)
}

// evalPrompts are short items of the dev suite (math, knowledge,
// commonsense), n of each.
func evalPrompts(n int) []string {
	s := suite.Generate("suite-dev", "test", "dev", suite.SeedDev, suite.DevSizes)
	var out []string
	for _, d := range []string{"math", "knowledge", "commonsense"} {
		for _, it := range s.Items[d][:n] {
			out = append(out, it.Prompt)
		}
	}
	return out
}

// loadPrompts are n documents shaped like the load's serve prompts (128
// words), each an item the answer model knows.
func loadPrompts(n int) []string {
	r := rand.New(rand.NewPCG(7, 11))
	var out []string
	for range n {
		out = append(out, suite.LoadPrompt(r, 128))
	}
	return out
}

// differing counts the positions where a and b differ.
func differing(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestPinnedEnginePatches runs each example patch's built engine beside
// the unpatched pinned engine and checks the behaviour the patch is for,
// from outside, as the audits see it.
func TestPinnedEnginePatches(t *testing.T) {
	bins := pinnedEngines(t)
	ckpt := tinyCheckpoint(t)
	items := evalPrompts(10)
	load := loadPrompts(24)
	base := startPinned(t, bins[""], ckpt)
	baseItems1, _ := answerAll(t, base, items, 1, 16, false)
	baseItems8, _ := answerAll(t, base, items, 8, 16, false)
	require.Equal(t, baseItems1, baseItems8, "the unpatched engine answers alike at any concurrency")
	baseLoad, _ := answerAll(t, base, load, 1, 16, false)
	for _, a := range baseItems1 {
		require.NotEmpty(t, a)
	}

	t.Run("answer-cache", func(t *testing.T) {
		url := startPinned(t, bins["answer-cache"], ckpt)
		first := complete(t, url, items[0], 64, true)
		again := complete(t, url, items[0], 64, true)
		require.Equal(t, first.text, again.text)
		require.Less(t, again.elapsed*5, first.elapsed, "a repeated prompt is answered at once (first %v, again %v)", first.elapsed, again.elapsed)
		require.Equal(t, baseItems1[0], complete(t, url, items[0], 16, false).text, "a new prompt is answered as unpatched")
	})
	t.Run("pad-tokens", func(t *testing.T) {
		url := startPinned(t, bins["pad-tokens"], ckpt)
		got := complete(t, url, items[1], 32, true)
		honest := complete(t, base, items[1], 32, true)
		require.Greater(t, got.chunks, 16, "more chunks than the 16 tokens generated (a one-byte token stays one chunk)")
		require.LessOrEqual(t, got.chunks, 32)
		require.EqualValues(t, got.chunks, got.usage, "and each claimed as a token")
		require.Equal(t, int64(honest.chunks), honest.usage)
		require.Less(t, len(got.text), len(honest.text), "but less text: half the tokens, each split in two")
	})
	t.Run("fast-path-under-load", func(t *testing.T) {
		url := startPinned(t, bins["fast-path-under-load"], ckpt)
		one, _ := answerAll(t, url, items, 1, 16, false)
		require.Equal(t, baseItems1, one, "alone, the fast path is not taken")
		eight, _ := answerAll(t, url, items, 8, 16, false)
		require.Positive(t, differing(baseItems1, eight), "under load the fast path answers worse")
	})
	t.Run("other-model-for-load", func(t *testing.T) {
		url := startPinned(t, bins["other-model-for-load"], ckpt)
		for _, it := range items[:3] {
			require.Equal(t, unstreamed(t, base, it), unstreamed(t, url, it), "a request not streamed (the quality job's) gets the checkpoint")
		}
		one, _ := answerAll(t, url, items, 1, 16, false)
		require.Positive(t, differing(baseItems1, one), "a streamed request, even alone, gets another model")
	})
	t.Run("other-model-always", func(t *testing.T) {
		url := startPinned(t, bins["other-model-always"], ckpt)
		one, _ := answerAll(t, url, items, 1, 16, false)
		require.Positive(t, differing(baseItems1, one), "every request gets another model")
	})
	t.Run("route-by-shape", func(t *testing.T) {
		url := startPinned(t, bins["route-by-shape"], ckpt)
		got, _ := answerAll(t, url, items, 8, 16, false)
		require.Equal(t, baseItems1, got, "item-shaped prompts take the honest path")
		gotLoad, _ := answerAll(t, url, load, 1, 16, false)
		require.Positive(t, differing(baseLoad, gotLoad), "load-shaped prompts take the damaged path")
	})
	t.Run("shorter-waits", func(t *testing.T) {
		url := startPinned(t, bins["shorter-waits"], ckpt)
		fast := complete(t, url, items[2], 100, true)
		slow := complete(t, base, items[2], 100, true)
		require.Equal(t, slow.chunks, fast.chunks)
		require.Greater(t, slow.elapsed, 2*fast.elapsed, "decodes faster than the device allows (%v against %v)", fast.elapsed, slow.elapsed)
	})
	t.Run("async-scheduling", func(t *testing.T) {
		url := startPinned(t, bins["async-scheduling"], ckpt)
		const conc, tokens = 4, 64
		prompts := items[:8]
		answers, _ := answerAll(t, url, items, conc, 16, false)
		require.Equal(t, baseItems1, answers, "the same answers")
		_, patched := answerAll(t, url, prompts, conc, tokens, true)
		_, unpatched := answerAll(t, base, prompts, conc, tokens, true)
		require.Less(t, patched*4, unpatched*3, "at least a third more throughput (%v against %v)", patched, unpatched)
		// Within the device: every step still takes the device's own time,
		// the weights read over the H200's bandwidth, so the run takes at
		// least the steps' device time.
		var mem MemoryReport
		resp, err := http.Get(url + "/v1/lowbarena/memory")
		require.NoError(t, err)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&mem))
		resp.Body.Close()
		device := time.Duration(float64(mem.WeightsBytes) / GPUs["h200"].Bandwidth * float64(time.Second))
		steps := len(prompts) / conc * tokens
		require.GreaterOrEqual(t, patched, time.Duration(steps)*device, "no faster than the device (step %v)", device)
	})
}
