package bus

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
)

// eventAttrs names what an event is about: a stage event's submission is
// its subject and its stage its type's, a job event's submission its
// payload's submission_id (none for a shared job), a round event's round
// its subject.
func TestEventAttrs(t *testing.T) {
	for _, tc := range []struct {
		name, typ, subject, data string
		want                     map[string]string
	}{
		{"stage event", string(events.BuildStarted), "sub-1", `{"submission_id":"sub-1","stage":"build","attempt":1}`,
			map[string]string{"lowbarena.event_type": string(events.BuildStarted), "lowbarena.submission_id": "sub-1", "lowbarena.stage": "build"}},
		{"job of a submission", string(events.RunnerJobCompleted), "job-1", `{"job_id":"job-1","kind":"efficiency","submission_id":"sub-1","pod":"pod-0"}`,
			map[string]string{"lowbarena.event_type": string(events.RunnerJobCompleted), "lowbarena.submission_id": "sub-1", "lowbarena.job_id": "job-1",
				"lowbarena.job_kind": "efficiency", "lowbarena.pod": "pod-0"}},
		{"shared job", string(events.RunnerJobRequested), "ref-1", `{"job_id":"ref-1","kind":"quality"}`,
			map[string]string{"lowbarena.event_type": string(events.RunnerJobRequested), "lowbarena.job_id": "ref-1", "lowbarena.job_kind": "quality"}},
		{"round event", string(events.RoundStep), "round-1", `{"round_id":"round-1","step":3}`,
			map[string]string{"lowbarena.event_type": string(events.RoundStep), "lowbarena.round_id": "round-1"}},
		{"submission received", string(events.SubmissionReceived), "sub-3", `{"submission_id":"sub-3"}`,
			map[string]string{"lowbarena.event_type": string(events.SubmissionReceived), "lowbarena.submission_id": "sub-3"}},
		{"job payload that does not decode", string(events.RunnerJobStarted), "job-2", `[1,2]`,
			map[string]string{"lowbarena.event_type": string(events.RunnerJobStarted), "lowbarena.job_id": "job-2"}},
		{"unknown type", "dev.lowbarena.nope.v1", "x", `{}`, map[string]string{"lowbarena.event_type": "dev.lowbarena.nope.v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for _, kv := range eventAttrs(tc.typ, tc.subject, []byte(tc.data)) {
				got[string(kv.Key)] = kv.Value.AsString()
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// BenchmarkEventAttrs is what naming a span's submission, stage, job and
// pod costs per publish or process span that records: one more decode of
// the payload (a runner.job.completed with a 2 KB result here).
func BenchmarkEventAttrs(b *testing.B) {
	result := make([]int, 400)
	data, err := json.Marshal(map[string]any{"job_id": "eff-0123456789abcdef01234567", "kind": "efficiency", "submission_id": "0123456789abcdef",
		"pod": "pod-0", "runner": "pod-0/runner-0", "gpu_hours": 0.01, "result": result})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		_ = eventAttrs(string(events.RunnerJobCompleted), "eff-0123456789abcdef01234567", data)
	}
}
