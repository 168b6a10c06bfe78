package events_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/schemas"
)

func catalogueTypes() []string {
	out := make([]string, 0, len(events.Catalogue))
	for _, s := range events.Catalogue {
		out = append(out, string(s.Type))
	}
	sort.Strings(out)
	return out
}

func TestCatalogueMatchesTheSchemaFiles(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)

	// The validator's types are the embedded files; the files on disk are
	// checked too, so a schema that is not embedded would show.
	withSchema := v.EventTypes()
	sort.Strings(withSchema)
	require.Equal(t, withSchema, catalogueTypes(), "every catalogued type has a schema, and every schema a catalogued type")

	files, err := filepath.Glob("../schemas/events/*.json")
	require.NoError(t, err)
	var onDisk []string
	for _, f := range files {
		onDisk = append(onDisk, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	sort.Strings(onDisk)
	require.Equal(t, catalogueTypes(), onDisk)

	seen := map[events.Type]bool{}
	for _, s := range events.Catalogue {
		require.False(t, seen[s.Type], "%s is catalogued twice", s.Type)
		seen[s.Type] = true
		require.Equal(t, "dev.lowbarena."+s.Noun+"."+s.Verb+".v1", string(s.Type))
		_, err := os.Stat(filepath.Join("../schemas/events", s.Schema()))
		require.NoError(t, err, "Spec.Schema names the file")
		got, ok := events.Lookup(s.Type)
		require.True(t, ok)
		require.Equal(t, s.Type, got.Type)
		if s.Stage != "" {
			require.Contains(t, events.Stages, s.Stage)
			require.Equal(t, s.Stage, s.Noun, "a stage event's noun is its stage")
		}
		want := events.StreamArena
		if s.Type == events.RunnerJobRequested {
			want = events.StreamRunnerJobs
		}
		require.Equal(t, want, s.Stream, s.Type)
	}
	_, ok := events.Lookup("dev.lowbarena.nope.v1")
	require.False(t, ok)
}

func TestEverySampleValidatesAndRoundTrips(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	for _, s := range events.Catalogue {
		t.Run(s.Noun+"."+s.Verb, func(t *testing.T) {
			sample := bustest.Sample(s.Type)
			require.IsType(t, s.New(), sample, "the sample has the payload type the spec names")

			e, err := events.NewEvent(events.DeriveID("cause", string(s.Type)), s.Type, events.Source("test"), bustest.SampleSubject, sample)
			require.NoError(t, err)
			require.NoError(t, e.Validate())
			require.NoError(t, v.Validate(e.Type(), e.Data()), "sample data: %s", e.Data())

			back, err := events.DecodeData(e)
			require.NoError(t, err)
			require.IsType(t, sample, back)
			again, err := json.Marshal(back)
			require.NoError(t, err)
			require.JSONEq(t, string(e.Data()), string(again), "decoding the data gives the payload back")

			// The zero payload must not validate: every schema requires
			// at least an id that the zero value leaves empty.
			zero, err := json.Marshal(s.New())
			require.NoError(t, err)
			require.ErrorIs(t, v.Validate(string(s.Type), zero), schemas.ErrInvalid, "zero payload %s", zero)
		})
	}
}

func TestNilListsMarshalAsEmptyArrays(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	for _, tc := range []struct {
		typ  events.Type
		data any
		list string
	}{
		{events.RoundStarted, events.RoundStartedData{RoundID: "r1", Campaign: "c", Pod: "p"}, `"candidates":[]`},
		{events.RoundCompleted, &events.RoundCompletedData{RoundID: "r1", Campaign: "c"}, `"entries":[]`},
		{events.BuildCompleted, events.BuildCompletedData{SubmissionID: "s1", BundleDigest: strings.Repeat("0", 64),
			Artifact: events.BundleRef{Store: "jetstream", Bucket: "b", Object: "o", SHA256: strings.Repeat("0", 64)}}, `"files":[]`},
	} {
		raw, err := json.Marshal(tc.data)
		require.NoError(t, err)
		require.Contains(t, string(raw), tc.list)
		require.NoError(t, v.Validate(string(tc.typ), raw), "%s", raw)
	}
}

func TestNewEventAndDecodeDataRefuseUnknownTypes(t *testing.T) {
	_, err := events.NewEvent("x", "dev.lowbarena.nope.v1", events.Source("t"), "s", struct{}{})
	require.ErrorIs(t, err, events.ErrUnknownType)
	_, err = events.NewEvent("x", events.BuildStarted, events.Source("t"), "s", func() {})
	require.ErrorContains(t, err, "marshal")

	e, err := events.NewEvent("x", events.BuildStarted, events.Source("t"), "s", map[string]any{"submission_id": "s"})
	require.NoError(t, err)
	e.SetType("dev.lowbarena.nope.v1")
	_, err = events.DecodeData(e)
	require.ErrorIs(t, err, events.ErrUnknownType)
	e.SetType(string(events.BuildStarted))
	require.NoError(t, e.SetData("application/json", []byte(`{"attempt":"one"}`)))
	_, err = events.DecodeData(e)
	require.ErrorContains(t, err, "decode")
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"b0c4e95f426f48e2", true},
		{"qwen3-8b_X", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"a.b", false},
		{"a*", false},
		{">", false},
		{"a b", false},
		{"é", false},
		{"a\n", false},
	} {
		require.Equal(t, tc.ok, events.ValidID(tc.id), "%q", tc.id)
	}
}

func TestSubject(t *testing.T) {
	for _, tc := range []struct {
		typ     events.Type
		id      string
		want    string
		wantErr string
	}{
		{events.SubmissionReceived, "s1", "arena.submission.received.s1", ""},
		{events.BuildFailed, "s1", "arena.build.failed.s1", ""},
		{events.RunnerJobProgress, "j1", "arena.runner.job.progress.j1", ""},
		{events.RoundStep, "r-1", "arena.round.step.r-1", ""},
		{events.ScoreSkipped, "s_2", "arena.score.skipped.s_2", ""},
		{events.RunnerJobRequested, "s1", "", "use JobSubject"},
		{events.RunnerJobCompleted, "j1", "", "use JobOutcomeSubject"},
		{"dev.lowbarena.nope.v1", "s1", "", "unknown event type"},
		{events.BuildStarted, "a.b", "", "not a valid subject token"},
		{events.BuildStarted, "", "", "not a valid subject token"},
		{events.BuildStarted, "*", "", "not a valid subject token"},
	} {
		got, err := events.Subject(tc.typ, tc.id)
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, "%s %q", tc.typ, tc.id)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		require.True(t, subjectMatches(events.FilterFor(tc.typ), got), "FilterFor(%s) matches %s", tc.typ, got)
	}
}

func TestJobSubject(t *testing.T) {
	for _, tc := range []struct {
		kind, id, want string
	}{
		{"quality", "s1", "jobs.quality.s1"},
		{"efficiency", "r-9", "jobs.efficiency.r-9"},
		{"quality", "a.b", ""},
		{"q.x", "s1", ""},
		{"", "s1", ""},
		{"quality", ">", ""},
	} {
		got, err := events.JobSubject(tc.kind, tc.id)
		if tc.want == "" {
			require.Error(t, err, "%q %q", tc.kind, tc.id)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		require.True(t, subjectMatches(events.FilterFor(events.RunnerJobRequested), got))
	}
}

// A job that names a pod goes to a fourth token, which only that pod's
// filter matches; one without stays on three, which only the shared filter
// matches. Both match FilterFor's jobs.> (what the stream holds).
func TestPinnedJobSubject(t *testing.T) {
	for _, tc := range []struct {
		kind, id, pod, want string
		durable             string // the filter that matches: "shared", a pod, or none
	}{
		{"sla", "r1-e1", "", "jobs.sla.r1-e1", "shared"},
		{"sla", "r1-e1", "pod-a", "jobs.sla.r1-e1.pod-a", "pod-a"},
		{"sla", "r1-e1", "h200_b", "jobs.sla.r1-e1.h200_b", "h200_b"},
		{"sla", "r1-e1", "pod.a", "", ""},
		{"sla", "r1-e1", "*", "", ""},
		{"sla", "r1-e1", "pod a", "", ""},
		{"sla", "a.b", "pod-a", "", ""},
	} {
		got, err := events.PinnedJobSubject(tc.kind, tc.id, tc.pod)
		if tc.want == "" {
			require.Error(t, err, "%q %q %q", tc.kind, tc.id, tc.pod)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		require.True(t, subjectMatches(events.FilterFor(events.RunnerJobRequested), got))
		require.Equal(t, tc.durable == "shared", subjectMatches(events.JobSharedFilter, got), "shared filter on %s", got)
		for _, pod := range []string{"pod-a", "pod-b", "h200_b"} {
			require.Equal(t, tc.durable == pod, subjectMatches(events.JobPodFilter(pod), got), "%s's filter on %s", pod, got)
		}
	}
}

// Job outcomes carry their kind: a kind's filters match its own outcomes,
// never another kind's.
func TestJobOutcomeSubject(t *testing.T) {
	got, err := events.JobOutcomeSubject(events.RunnerJobCompleted, "efficiency", "eff-1")
	require.NoError(t, err)
	require.Equal(t, "arena.runner.job.completed.efficiency.eff-1", got)
	got, err = events.JobOutcomeSubject(events.RunnerJobFailed, "sla", "sla-1")
	require.NoError(t, err)
	require.Equal(t, "arena.runner.job.failed.sla.sla-1", got)
	for _, bad := range [][2]string{{"a.b", "j"}, {"q", ""}, {"*", "j"}} {
		_, err := events.JobOutcomeSubject(events.RunnerJobCompleted, bad[0], bad[1])
		require.Error(t, err, "%v", bad)
	}
	_, err = events.JobOutcomeSubject(events.RunnerJobProgress, "q", "j")
	require.ErrorContains(t, err, "use Subject")

	matches := func(filters []string, subject string) bool {
		for _, f := range filters {
			if subjectMatches(f, subject) {
				return true
			}
		}
		return false
	}
	eff := events.JobOutcomeFilters("efficiency")
	for subject, want := range map[string]bool{
		"arena.runner.job.completed.efficiency.eff-1": true,
		"arena.runner.job.failed.efficiency.eff-1":    true,
		"arena.runner.job.completed.quality.q-1":      false,
		"arena.runner.job.failed.sla.s-1":             false,
		"arena.runner.job.progress.eff-1":             false,
	} {
		require.Equal(t, want, matches(eff, subject), subject)
	}
	require.True(t, subjectMatches(events.FilterFor(events.RunnerJobCompleted), "arena.runner.job.completed.quality.q-1"))
}

// A topic decodes only its own type, into its own payload.
func TestTopicDecode(t *testing.T) {
	e, err := events.Build.Failed.Event("id-1", "/lowbarena/build", "s1", events.StageFailedData{SubmissionID: "s1", Stage: "build", Reason: "r", Message: "m"})
	require.NoError(t, err)
	got, err := events.Build.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, "r", got.Reason)
	_, err = events.Contract.Failed.Decode(e)
	require.ErrorContains(t, err, "decode dev.lowbarena.build.failed.v1 as dev.lowbarena.contract.failed.v1")
	s, ok := events.Lookup(events.BuildCompleted)
	require.True(t, ok)
	require.IsType(t, new(events.BuildCompletedData), s.New(), "the catalogue's payload comes from the topic")
}

func TestFilterForMatchesOnlyItsType(t *testing.T) {
	for _, a := range events.Catalogue {
		if a.Stream != events.StreamArena {
			continue
		}
		for _, b := range events.Catalogue {
			if b.Stream != events.StreamArena {
				continue
			}
			subj, err := events.Subject(b.Type, "x")
			if b.KindInSubject {
				subj, err = events.JobOutcomeSubject(b.Type, "quality", "x")
			}
			require.NoError(t, err)
			require.Equal(t, a.Type == b.Type, subjectMatches(events.FilterFor(a.Type), subj), "%s vs %s", events.FilterFor(a.Type), subj)
		}
	}
	require.Panics(t, func() { events.FilterFor("dev.lowbarena.nope.v1") })
}

func TestDeriveID(t *testing.T) {
	base := events.DeriveID("in-1", "build.started")
	require.Len(t, base, 32)
	require.True(t, events.ValidID(base), "a derived id is a subject token")
	require.Equal(t, base, events.DeriveID("in-1", "build.started"), "deterministic")
	for _, tc := range []struct {
		name  string
		cause string
		parts []string
	}{
		{"other cause", "in-2", []string{"build.started"}},
		{"other part", "in-1", []string{"build.failed"}},
		{"extra part", "in-1", []string{"build.started", "item-1"}},
		{"no part", "in-1", nil},
		{"parts are separated, not concatenated", "in-1", []string{"build.", "started"}},
		{"cause and part are separated", "in-1build.started", nil},
	} {
		got := events.DeriveID(tc.cause, tc.parts...)
		require.NotEqual(t, base, got, tc.name)
		require.Len(t, got, 32, tc.name)
	}
	require.NotEqual(t, events.DeriveID("a", "b", "c"), events.DeriveID("a", "bc"))
	require.Equal(t, "/lowbarena/gateway", events.Source("gateway"))
}

// subjectMatches is the NATS server's own subject matching.
func subjectMatches(filter, subject string) bool { return server.SubjectMatchesFilter(subject, filter) }
