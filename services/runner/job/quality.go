package job

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// KindQuality is the job kind that answers and grades an eval suite.
const KindQuality = events.JobQuality

// Graded is one answered sample of one item, graded unless Ungraded.
type Graded struct {
	Item         suite.Item
	Sample       int
	Score        float64
	Formatted    bool
	Empty        bool
	OutputTokens int
	// Answer is the engine's text.
	Answer string
	// Ungraded marks a code answer (suite.GraderCode), which the GPU
	// runner never runs: Score and Formatted are zero, Empty says only
	// whether the answer is blank or too long (grade.Refuse), and the
	// quality stage grades it in its own sandbox.
	Ungraded bool
}

// Quality starts the engine on the checkpoint, answers every item of the
// suite (each sample with seed = its index, the campaign's temperature),
// grades every answer whose grader is pure Go (exact, numeric, choice,
// regex), hands the rows to rows in batches, and keeps the top-k logprobs
// of the first KLSequences items for the KL against BF16. Code answers
// are handed over ungraded (Graded.Ungraded, counted in the result's
// Ungraded): a GPU runner never runs a model's program, so it needs no
// sandbox, and the quality stage grades them. An engine failure is an
// *engine.Failure; an unreadable answer a *loadgen.Error. A job that
// fails leaves no result: its rows are tagged with its run and never
// read as complete. A candidate answers on the job's patched engine when
// it has one (Runner.Patched); the BF16 reference never does.
//
//nolint:gocyclo // one job's steps in order: plan the items, run them against the engine, grade and hand over rows, keep the KL sequences
func (r *Runner) Quality(ctx context.Context, p events.QualityJobParams, checkpoint string, s *suite.Suite,
	rows func(ctx context.Context, batch []Graded) error) (events.QualityJobResult, error) {
	out := events.QualityJobResult{Campaign: p.Campaign, Role: p.Role, SuiteKey: p.SuiteKey}
	kv := p.KVCacheDType
	if kv == "" {
		kv = "auto"
	}
	type task struct {
		it     suite.Item
		sample int
		kl     int // index of its KL sequence, or -1
	}
	var tasks []task
	klIndex := 0
	for _, d := range s.Domains {
		for _, it := range s.Items[d] {
			n := it.Samples
			if n <= 0 {
				n = max(p.Sampling.Samples, 1)
			}
			out.Items++
			for j := range n {
				t := task{it: it, sample: j, kl: -1}
				if j == 0 && klIndex < p.Sampling.KLSequences && it.Prompt != "" {
					t.kl = klIndex
					out.KLItems = append(out.KLItems, it.ID)
					klIndex++
				}
				tasks = append(tasks, t)
			}
		}
	}
	out.Generations = len(tasks)
	out.Logprobs = make([][]events.TopK, klIndex)
	// graders holds the grader of every item but code items, whose
	// answers are left to the quality stage.
	graders := map[string]grade.Grader{}
	for _, t := range tasks {
		if t.it.Grader == suite.GraderCode {
			out.Ungraded++
			continue
		}
		if _, ok := graders[t.it.ID]; ok {
			continue
		}
		g, err := grade.For(t.it)
		if err != nil {
			return out, fmt.Errorf("job: item %s: %w", t.it.ID, err)
		}
		graders[t.it.ID] = g
	}

	l := Launch{Run: p.Role, Keep: true, Command: p.Engine.Command, Checkpoint: checkpoint, KVCacheDType: kv,
		MaxNumSeqs: p.Engine.MaxNumSeqs, MaxModelLen: p.Engine.MaxModelLen}
	if p.Role != events.RoleBF16 {
		// A candidate answers on its patched engine, when it has one.
		l = r.Candidate(l)
	}
	t0 := time.Now()
	var answering time.Duration
	served, err := r.session(ctx, l, len(tasks), func(ss *session, _ *Served) error {
		began := time.Now()
		defer func() { answering = time.Since(began) }()
		hc := &http.Client{Timeout: 4 * max(r.IdleTimeout, 30*time.Second), Transport: ss.tr}
		conc := max(p.Sampling.Concurrency, 1)
		work := make(chan task)
		var (
			mu       sync.Mutex
			firstErr error
			batch    []Graded
			done     int
		)
		flush := func(force bool) error {
			if len(batch) == 0 || (!force && len(batch) < 256) {
				return nil
			}
			b := batch
			batch = nil
			if rows == nil {
				return nil
			}
			return rows(ss.ctx, b)
		}
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for t := range work {
					g, err := r.answer(ss, hc, p, t.it, t.sample, t.kl >= 0)
					var gr grade.Result
					gd := graders[t.it.ID] // nil for a code item
					switch {
					case err != nil:
					case gd == nil:
						// A code answer: only what every grader refuses
						// unread is known here.
						gr, _ = grade.Refuse(g.text, false)
					default:
						gr, err = gd.Grade(ss.jctx, t.it, g.text)
					}
					mu.Lock()
					if err != nil {
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						continue
					}
					if t.kl >= 0 {
						out.Logprobs[t.kl] = g.logprobs
					}
					if gr.Empty {
						out.Empty++
					}
					batch = append(batch, Graded{Item: t.it, Sample: t.sample, Score: gr.Score, Formatted: gr.Formatted,
						Empty: gr.Empty, OutputTokens: g.tokens, Answer: g.text, Ungraded: gd == nil})
					done++
					if done%max(len(tasks)/10, 1) == 0 {
						r.progress("answering "+p.Role, done, len(tasks))
					}
					if ferr := flush(false); ferr != nil && firstErr == nil {
						firstErr = ferr
					}
					mu.Unlock()
				}
			})
		}
	feed:
		for _, t := range tasks {
			mu.Lock()
			failed := firstErr != nil
			mu.Unlock()
			if failed {
				break
			}
			select {
			case work <- t:
			case <-ss.jctx.Done():
				break feed
			}
		}
		close(work)
		wg.Wait()
		if firstErr == nil && ss.jctx.Err() != nil {
			firstErr = ss.jctx.Err()
		}
		if firstErr != nil {
			return r.why(ss.ctx, ss.jctx, ss.e, firstErr)
		}
		return flush(true)
	})
	out.Seconds, out.GPU, out.Simulated = served.Seconds, served.GPU, served.Simulated
	// The job's one engine start; its serving is the suite's answering,
	// the engine's whole time after its start.
	served.ServingSeconds = answering.Seconds()
	out.Add(served, false)
	out.ServingSeconds = formula.Round(out.ServingSeconds, 3)
	out.HeldSeconds = formula.Round(time.Since(t0).Seconds(), 3)
	return out, err
}

type answer struct {
	text     string
	tokens   int
	logprobs []events.TopK
}

// answer asks the engine for one sample of one item.
func (r *Runner) answer(ss *session, hc *http.Client, p events.QualityJobParams, it suite.Item, sample int, withLogprobs bool) (answer, error) {
	maxTokens := it.MaxTokens
	if maxTokens <= 0 {
		maxTokens = max(p.Sampling.MaxTokens, 1)
	}
	body := map[string]any{"model": ss.model, "max_tokens": maxTokens, "temperature": p.Sampling.Temperature, "seed": sample}
	path := "/v1/completions"
	if it.Prompt != "" {
		body["prompt"] = it.Prompt
		if withLogprobs && p.Sampling.TopLogprobs > 0 {
			body["logprobs"] = p.Sampling.TopLogprobs
		}
	} else {
		path = "/v1/chat/completions"
		body["messages"] = it.Messages
	}
	buf, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ss.jctx, http.MethodPost, ss.base+path, bytes.NewReader(buf))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, &loadgen.Error{Code: reason.EngineDisconnected, Message: fmt.Sprintf("item %s: %v", it.ID, err), Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return answer{}, &loadgen.Error{Code: reason.EngineDisconnected, Message: fmt.Sprintf("item %s: %v", it.ID, err), Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, &loadgen.Error{Code: reason.EngineHTTPError, Message: fmt.Sprintf("item %s: HTTP %d: %.300s", it.ID, resp.StatusCode, data)}
	}
	var c struct {
		Choices []struct {
			Text    string `json:"text"`
			Message *struct {
				Content string `json:"content"`
			} `json:"message"`
			Logprobs *struct {
				TopLogprobs []events.TopK `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &c); err != nil || len(c.Choices) == 0 {
		return answer{}, &loadgen.Error{Code: reason.EngineBadAnswer, Message: fmt.Sprintf("item %s: the engine's answer is not a completion: %.200s", it.ID, data)}
	}
	a := answer{text: c.Choices[0].Text, tokens: c.Usage.CompletionTokens}
	if m := c.Choices[0].Message; m != nil {
		a.text = m.Content
	}
	if lp := c.Choices[0].Logprobs; lp != nil {
		a.logprobs = lp.TopLogprobs
	}
	return a, nil
}
