package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// Kind is how the runner runs one job kind, P being the type of its
// params and R of its result, both bound by the kind in the catalogue
// (events.JobKind) to the types the stages that ask for it and read its
// outcome use. A kind is registered once (see Register and kinds);
// Handle looks a job's kind up and does the rest the same way for every
// kind: started, the checkpoint and Fetch's bundles fetched, Run, then
// completed or failed.
type Kind[P, R any] struct {
	// Job is the kind in the catalogue: its name on the queue
	// ("efficiency"), in the job's payload and in its outcome subjects,
	// and the codec of its params and result.
	Job events.JobKind[P, R]
	// Engine completes the decoded params with the engine command the
	// request carries apart from them (nil: the kind has no engine).
	Engine func(p *P, command string)
	// Fetch lists the bundles the job needs beside its checkpoint (nil:
	// none); Run receives their folders in the same order.
	Fetch func(p P) []Artifact
	// Patched is the candidate's patched engine the params ask for (nil
	// func or nil result: none). Handle fetches the campaign's bundle,
	// builds the engine once per pod and hands it to Run in
	// Env.Job.Patched, or fails the job with the build's reason.
	Patched func(p P) *EnginePatch
	// Run runs the job. Its Result's Seconds count on failure too. A
	// *Failure, an engine.Failure or a loadgen.Error fails the job (an
	// ack); any other error hands it back (a retry).
	Run func(ctx context.Context, env Env, p P) (Result[R], error)
}

// Artifact is a bundle a job needs beside its checkpoint.
type Artifact struct {
	Ref events.BundleRef
	// What names it in the failure when it is missing ("the campaign's
	// BF16 reference").
	What string
}

// Env is what the runner hands a kind's Run.
type Env struct {
	// Request is the job.
	Request events.RunnerJobRequestedData
	// Job is the engine runner, its sample, request and progress
	// callbacks wired to this attempt of the job.
	Job *job.Runner
	// Checkpoint is the folder of the job's checkpoint; Artifacts are the
	// folders of Fetch's bundles, in Fetch's order.
	Checkpoint string
	Artifacts  []string
}

// Simulated reports whether the job runs without NVML.
func (e Env) Simulated() bool { return e.Job.NVML == nil }

// Result is what a job's run yields, R being its kind's result type.
type Result[R any] struct {
	// Value is the job's result: runner.job.completed's result field.
	Value R
	// Seconds is the GPU time the run took.
	Seconds float64
	// Attrs are extra attributes of the completion's log line.
	Attrs []any
	// GPU is how the run used its GPU (its engine starts, the time it
	// held the GPU and served); nil for a run that used none. It counts
	// on failure too.
	GPU *events.JobGPUTime
}

// Failure is a job's own failure with its reason: the job ends with
// runner.job.failed and is acked.
type Failure struct {
	Reason  reason.Code
	Message string
}

func (f *Failure) Error() string { return string(f.Reason) + ": " + f.Message }

// Fail returns a job failure with code and message.
func Fail(code reason.Code, message string) error { return &Failure{Reason: code, Message: message} }

func asFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return nil
}

// Registry holds the job kinds a runner runs, in registration order.
type Registry struct {
	names []string
	kinds map[string]prepare
}

// prepare decodes a job's params into a prepared job: what to fetch and
// how to run it. Its error is the params' (job_bad_params).
type prepare func(req events.RunnerJobRequestedData) (prepared, error)

type prepared struct {
	fetch   []Artifact
	patched *EnginePatch
	run     func(ctx context.Context, env Env) (ran, error)
}

// ran is a job's run as Handle sees it, whatever its kind: its Result
// with the value encoded by the kind (Body), or the encoding's error
// (Unencodable) for a run that succeeded.
type ran struct {
	Seconds     float64
	Attrs       []any
	GPU         *events.JobGPUTime
	Body        json.RawMessage
	Unencodable error
}

// Register adds k to r. A kind registered twice is a programming error
// and panics.
func Register[P, R any](r *Registry, k Kind[P, R]) {
	if r.kinds == nil {
		r.kinds = map[string]prepare{}
	}
	name := k.Job.Name
	if _, dup := r.kinds[name]; dup || name == "" || k.Run == nil {
		panic(fmt.Sprintf("runner: job kind %q registered twice, unnamed or without Run", name))
	}
	r.names = append(r.names, name)
	r.kinds[name] = func(req events.RunnerJobRequestedData) (prepared, error) {
		p, err := k.Job.Params(req)
		if err != nil {
			return prepared{}, err
		}
		if k.Engine != nil {
			k.Engine(&p, req.Engine)
		}
		var fetch []Artifact
		if k.Fetch != nil {
			fetch = k.Fetch(p)
		}
		var patched *EnginePatch
		if k.Patched != nil {
			patched = k.Patched(p)
		}
		run := func(ctx context.Context, env Env) (ran, error) {
			res, err := k.Run(ctx, env, p)
			out := ran{Seconds: res.Seconds, Attrs: res.Attrs, GPU: res.GPU}
			if err == nil {
				out.Body, out.Unencodable = k.Job.Encode(res.Value)
			}
			return out, err
		}
		return prepared{fetch: fetch, patched: patched, run: run}, nil
	}
}

// Names lists the registered kinds in registration order.
func (r *Registry) Names() []string { return append([]string(nil), r.names...) }

// lookup returns the kind's preparation, or a job_unknown_kind failure
// naming the kinds r has.
func (r *Registry) lookup(kind string) (prepare, error) {
	if p, ok := r.kinds[kind]; ok {
		return p, nil
	}
	return nil, Fail(reason.JobUnknownKind, fmt.Sprintf("this runner runs %s jobs, not %q", list(r.names), kind))
}

// list writes names as "a, b and c".
func list(names []string) string {
	switch len(names) {
	case 0:
		return "no"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
