package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/schemas"
)

// TestSubjectFromData reads, for every type of the catalogue, the subject
// its schema's sample names: the field each payload carries its id in is
// the one the arena publishes it under.
func TestSubjectFromData(t *testing.T) {
	want := map[string]string{"submission_id": "", "job_id": "", "round_id": ""}
	for _, s := range events.Catalogue {
		t.Run(string(s.Type), func(t *testing.T) {
			field := s.SubjectField()
			require.Contains(t, want, field)
			sample, ok := schemas.Example(string(s.Type))
			if !ok {
				sample = json.RawMessage(`{"` + field + `":"abc123"}`)
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal(sample, &m))
			id, ok := m[field].(string)
			require.True(t, ok, "the payload of %s names its subject in %s", s.Type, field)
			got, ok := events.SubjectFromData(s.Type, sample)
			require.True(t, ok)
			require.Equal(t, id, got)
		})
	}
	for _, tc := range []struct {
		name string
		t    events.Type
		data string
	}{
		{"unknown type", "dev.example.other.v1", `{"submission_id":"x"}`},
		{"not JSON", events.SubmissionReceived, `nope`},
		{"no such field", events.SubmissionReceived, `{"round_id":"x"}`},
		{"empty", events.SubmissionReceived, `{"submission_id":""}`},
		{"not a string", events.RoundStep, `{"round_id":7}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ok := events.SubjectFromData(tc.t, []byte(tc.data))
			require.False(t, ok)
		})
	}
	got, ok := events.SubjectFromData(events.RunnerJobProgress, []byte(`{"job_id":"j1","submission_id":"s1"}`))
	require.True(t, ok)
	require.Equal(t, "j1", got)
}
