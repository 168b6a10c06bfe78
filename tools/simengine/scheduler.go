package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTooLong is returned for a request whose KV (prompt + max_tokens) can
// never fit the pool or the model's context length.
var ErrTooLong = errors.New("request does not fit")

// Request is one sequence submitted to the scheduler. Tokens receives the
// index of each generated token and is closed when the sequence ends.
type Request struct {
	PromptTokens int64
	MaxTokens    int64
	Tokens       chan int64
	ctx          context.Context
	generated    int64
	admitted     bool
}

// Stats is a snapshot of the scheduler's state.
type Stats struct {
	Running, Waiting int
	KVUsedBytes      float64
	PeakUsedBytes    float64
	// ResidentTokens is the context the running sequences hold; the KV
	// pool holds it in blocks of BlockTokens, so KVUsedBytes is a little
	// more than ResidentTokens*KVBytesPerToken, as in paged engines.
	ResidentTokens int64
	TotalTokens    int64
	// Steps counts the scheduler steps run; DecodeSteps those that
	// admitted no new sequence (SGLang's forward_ct_decode: a step that
	// prefills new sequences is a prefill batch).
	Steps, DecodeSteps int64
}

// StepInfo is what one scheduler step did, handed to Scheduler.OnStep.
type StepInfo struct {
	// NewSeqs and NewTokens are the sequences admitted (prefilled) in the
	// step and their prompt tokens; a step with none is a decode step.
	NewSeqs   int
	NewTokens int64
	// Stats is the snapshot after the step (its Steps and DecodeSteps
	// count this one).
	Stats Stats
}

// Prefill reports whether the step admitted new sequences.
func (si StepInfo) Prefill() bool { return si.NewSeqs > 0 }

// Clock is the time source the scheduler's steps are paced by. The real
// one is wall time; tests give a clock that overshoots every sleep.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t or later, or false once ctx is done.
	SleepUntil(ctx context.Context, t time.Time) bool
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) SleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// MaxLag bounds how far the scheduler's virtual clock may run behind wall
// time and still be caught up: a step that ends later than this after its
// deadline (a descheduled process, a stopped debugger) moves the clock to
// now instead of racing through the backlog with zero-length steps.
const MaxLag = 50 * time.Millisecond

// Scheduler is a continuous-batching loop run in one goroutine: every step
// it admits waiting sequences that fit (FIFO), waits out the step's
// roofline time, and gives every running sequence one token.
//
// Invariant (pacing): step k ends at the virtual time T_k = T_{k-1} +
// StepTime(k), not at wall time + StepTime(k). A sleep that overshoots its
// deadline therefore shortens the next step's sleep instead of adding to
// the run, so over a busy period the delivered rate is the roofline's less
// one overshoot, whatever each timer's error. The virtual clock restarts
// at wall time when the engine goes idle (time without work is not owed)
// and when it falls more than MaxLag behind.
type Scheduler struct {
	plan    Plan
	maxSeqs int
	// Clock paces the steps; nil means wall time.
	Clock Clock
	// Hang, when set, stops all generation once HangAfter tokens were
	// generated in total (connections stay open).
	Hang      bool
	HangAfter int64
	// DieAfter, when > 0, calls OnDie once that many tokens were generated
	// in total.
	DieAfter int64
	// OnDie is called for DieAfter; the process exits there.
	OnDie func()
	// OnStep, when set, is called after every step that ran a sequence,
	// from the scheduler's goroutine, with a snapshot taken under the
	// lock: what an engine's per-step metrics see.
	OnStep func(StepInfo)

	mu       sync.Mutex
	waiting  []*Request
	running  []*Request
	reserved float64
	stats    Stats
	wake     chan struct{}
	// virtual is the end of the last step on the virtual clock; zero
	// while idle. Only Run's goroutine touches it.
	virtual time.Time
	// busy is the sum of the steps' roofline times, under mu.
	busy time.Duration
	// step is what the step being run admitted, under mu; ran is whether
	// it runs any sequence.
	step StepInfo
	ran  bool
}

// NewScheduler returns a scheduler for the plan; call Run to start it.
func NewScheduler(p Plan, maxSeqs int) *Scheduler {
	if maxSeqs <= 0 {
		maxSeqs = 1
	}
	s := &Scheduler{plan: p, maxSeqs: maxSeqs, wake: make(chan struct{}, 1)}
	s.stats.PeakUsedBytes = p.WeightsBytes + p.OtherBytes
	return s
}

// Submit queues a sequence. It ends when ctx is done.
func (s *Scheduler) Submit(ctx context.Context, prompt, maxTokens int64) (*Request, error) {
	need := float64(prompt+maxTokens) * s.plan.KVBytesPerToken
	if need > s.plan.KVPoolBytes || (s.plan.MaxModelLen > 0 && prompt+maxTokens > int64(s.plan.MaxModelLen)) {
		return nil, fmt.Errorf("%w: %d prompt + %d max tokens exceeds the context (%d) or KV pool (%d tokens)",
			ErrTooLong, prompt, maxTokens, s.plan.MaxModelLen, s.plan.KVTokens())
	}
	r := &Request{PromptTokens: prompt, MaxTokens: maxTokens, Tokens: make(chan int64, maxTokens+1), ctx: ctx}
	s.mu.Lock()
	s.waiting = append(s.waiting, r)
	s.stats.Waiting = len(s.waiting)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return r, nil
}

// Stats returns a snapshot.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func (r *Request) kvNeed(p Plan) float64 {
	return float64(r.PromptTokens+r.MaxTokens) * p.KVBytesPerToken
}

// Run loops until ctx is done.
func (s *Scheduler) Run(ctx context.Context) {
	clock := s.Clock
	if clock == nil {
		clock = wallClock{}
	}
	for {
		s.mu.Lock()
		idle := len(s.running) == 0 && len(s.waiting) == 0
		hung := s.Hang && s.stats.TotalTokens >= s.HangAfter
		s.mu.Unlock()
		if idle || hung {
			s.virtual = time.Time{}
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		d := s.prepareStep()
		if d > 0 {
			now := clock.Now()
			if s.virtual.IsZero() || now.Sub(s.virtual) > MaxLag {
				s.virtual = now
			}
			s.virtual = s.virtual.Add(d)
			if !clock.SleepUntil(ctx, s.virtual) {
				return
			}
		} else {
			// No sequence ran (all cancelled): nothing to pace.
			s.virtual = time.Time{}
		}
		s.finishStep()
	}
}

// Busy is the roofline time of all steps run so far: the time the
// simulated GPU was busy. Tokens over Busy is the rate the roofline allows
// for the steps the scheduler actually ran.
func (s *Scheduler) Busy() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy
}

// prepareStep drops cancelled sequences, admits waiting ones and returns
// the step's duration.
func (s *Scheduler) prepareStep() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = s.dropCancelled(s.running)
	s.waiting = s.dropCancelled(s.waiting)
	var prefill int64
	newSeqs := 0
	for len(s.waiting) > 0 && len(s.running) < s.maxSeqs {
		r := s.waiting[0]
		if s.reserved+r.kvNeed(s.plan) > s.plan.KVPoolBytes {
			break
		}
		s.waiting = s.waiting[1:]
		s.reserved += r.kvNeed(s.plan)
		r.admitted = true
		prefill += r.PromptTokens
		newSeqs++
		s.running = append(s.running, r)
	}
	s.step = StepInfo{NewSeqs: newSeqs, NewTokens: prefill}
	s.ran = len(s.running) > 0
	var ctxTokens int64
	for _, r := range s.running {
		ctxTokens += r.PromptTokens + r.generated
	}
	s.setCounts()
	if len(s.running) == 0 {
		return 0
	}
	d := s.plan.StepTime(len(s.running), ctxTokens, prefill)
	s.busy += d
	return d
}

func (s *Scheduler) dropCancelled(rs []*Request) []*Request {
	out := rs[:0]
	for _, r := range rs {
		if r.ctx.Err() != nil {
			if r.admitted {
				s.reserved -= r.kvNeed(s.plan)
			}
			close(r.Tokens)
			continue
		}
		out = append(out, r)
	}
	return out
}

// BlockTokens is the KV cache block size in tokens (vLLM's default).
const BlockTokens = 16

// setCounts updates the stats from the running sequences: their tokens,
// and the KV blocks those take.
func (s *Scheduler) setCounts() {
	s.stats.Running = len(s.running)
	s.stats.Waiting = len(s.waiting)
	bt := int64(BlockTokens)
	if s.plan.BlockTokens > 0 {
		bt = int64(s.plan.BlockTokens)
	}
	var tokens, blocks int64
	for _, r := range s.running {
		t := r.PromptTokens + r.generated
		tokens += t
		blocks += (t + bt - 1) / bt
	}
	s.stats.ResidentTokens = tokens
	s.stats.KVUsedBytes = float64(blocks*bt) * s.plan.KVBytesPerToken
	used := s.plan.WeightsBytes + s.plan.OtherBytes + s.stats.KVUsedBytes
	if used > s.stats.PeakUsedBytes {
		s.stats.PeakUsedBytes = used
	}
}

// finishStep hands every running sequence one token.
func (s *Scheduler) finishStep() {
	s.mu.Lock()
	out := s.running[:0]
	die := false
	var ctxTokens int64
	for _, r := range s.running {
		if s.Hang && s.stats.TotalTokens >= s.HangAfter {
			out = append(out, r)
			ctxTokens += r.PromptTokens + r.generated
			continue
		}
		r.Tokens <- r.generated
		r.generated++
		s.stats.TotalTokens++
		if s.DieAfter > 0 && s.stats.TotalTokens == s.DieAfter {
			die = true
		}
		if r.generated >= r.MaxTokens {
			s.reserved -= r.kvNeed(s.plan)
			close(r.Tokens)
			continue
		}
		ctxTokens += r.PromptTokens + r.generated
		out = append(out, r)
	}
	s.running = out
	s.setCounts()
	var info StepInfo
	ran := s.ran
	if ran {
		s.stats.Steps++
		if !s.step.Prefill() {
			s.stats.DecodeSteps++
		}
		info = s.step
		info.Stats = s.stats
	}
	s.ran = false
	s.mu.Unlock()
	if ran && s.OnStep != nil {
		s.OnStep(info)
	}
	if die && s.OnDie != nil {
		s.OnDie()
	}
}
