package events

import (
	"encoding/json"
	"fmt"
)

// JobKind is a job kind on the RUNNER_JOBS queue bound to the types of its
// params (P) and its result (R), as a Topic binds an event type to its
// payload. The stage that asks for a job builds the request with Request,
// the runner decodes the params with Params and encodes its result with
// Encode, and the stage that reads the outcome decodes it with Result: the
// same Go types at both ends, checked by the compiler. On the wire params
// and result stay plain JSON (RunnerJobRequestedData.Params,
// RunnerJobCompletedData.Result), encoded by encoding/json.
type JobKind[P, R any] struct {
	// Name is the kind on the queue ("efficiency"): the request's and
	// the outcomes' kind field and a token of their subjects.
	Name string
}

// The job kinds.
var (
	EfficiencyJob = JobKind[EfficiencyJobParams, EfficiencyJobResult]{Name: JobEfficiency}
	QualityJob    = JobKind[QualityJobParams, QualityJobResult]{Name: JobQuality}
	SLAJob        = JobKind[SLAJobParams, EngineRun]{Name: JobSLA}
)

// Request returns req as a job of this kind with params p: its Kind and
// Params set, the rest as given. Its error is p's encoding's.
func (k JobKind[P, R]) Request(req RunnerJobRequestedData, p P) (RunnerJobRequestedData, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return req, fmt.Errorf("%s job %s: encode params: %w", k.Name, req.JobID, err)
	}
	req.Kind, req.Params = k.Name, raw
	return req, nil
}

// Params decodes a request's params.
func (k JobKind[P, R]) Params(req RunnerJobRequestedData) (P, error) {
	var p P
	err := json.Unmarshal(req.Params, &p)
	return p, err
}

// Encode encodes a job's result for RunnerJobCompletedData.Result.
func (k JobKind[P, R]) Encode(r R) (json.RawMessage, error) {
	return json.Marshal(r)
}

// Result decodes a completed job's result.
func (k JobKind[P, R]) Result(c RunnerJobCompletedData) (R, error) {
	var r R
	err := json.Unmarshal(c.Result, &r)
	return r, err
}
