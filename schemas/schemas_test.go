package schemas_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/schemas"
)

func TestMigrationsAreNumberedAndSplit(t *testing.T) {
	ms, err := schemas.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version, "migrations are numbered 1, 2, 3 without gaps")
		require.NotEmpty(t, m.Statements, m.Name)
		for _, s := range m.Statements {
			require.NotContains(t, s, "--", "comments are stripped")
			require.False(t, strings.HasSuffix(s, ";"))
		}
	}
	require.Len(t, ms[0].Statements, 6, "0001 creates the six tables of DESIGN.md")
	for _, table := range []string{"gpu_samples", "requests", "quality_items", "stage_results", "scores", "round_steps"} {
		found := false
		for _, s := range ms[0].Statements {
			found = found || strings.Contains(s, "CREATE TABLE IF NOT EXISTS "+table+" ")
		}
		require.True(t, found, table)
	}
}

func TestMigrationDDLKeepsToWhatClickHouse18Takes(t *testing.T) {
	ms, err := schemas.Migrations()
	require.NoError(t, err)
	for _, m := range ms {
		for _, s := range m.Statements {
			for _, banned := range []string{"DateTime64", "Map(", "Bool", " TTL ", "CODEC", "JSON", "LowCardinality"} {
				require.NotContains(t, s, banned, "%s: ClickHouse 18.16 does not take %s", m.Name, banned)
			}
		}
	}
}

func TestFixtureRecordsMatchTheRecordSchema(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	files, err := filepath.Glob("testdata/lowbarena/submission_*.json")
	require.NoError(t, err)
	require.Len(t, files, 2)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, v.ValidateRecord(raw), f)
	}
}

func TestRecordSchemaRefusesBrokenRecords(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	raw, err := os.ReadFile("testdata/lowbarena/submission_qwen3-8b_b0c4e95f426f48e2.json")
	require.NoError(t, err)
	good := string(raw)
	cases := []struct{ name, from, to, want string }{
		{"unknown status", `"status": "done"`, `"status": "finished"`, "/status"},
		{"stage out of order", `"name": "build"`, `"name": "score"`, "/stages/0/name"},
		{"stage name not a code", `"name": "contract"`, `"name": "Contract Check"`, "/stages/1/name"},
		{"bad tier", `"tier": "fail"`, `"tier": "C"`, "/result/dev_quality/tier"},
		{"bad precision label", `"precision": "W8A8KV4"`, `"precision": "8-bit"`, "/solution/precision"},
		{"bad time", `"created_at": "2026-10-13T05:46:19Z"`, `"created_at": "yesterday"`, "/created_at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(good, tc.from, tc.to, 1)
			require.NotEqual(t, good, bad, "the case must change the record")
			err := v.ValidateRecord([]byte(bad))
			require.ErrorIs(t, err, schemas.ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestEventValidation(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	// One type per schema file: every file compiled, none skipped (the
	// catalogue's own test checks the files against the event types).
	files, err := filepath.Glob("events/dev.lowbarena.*.v1.json")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 26, "the pipeline's 26 types at least")
	require.Len(t, v.EventTypes(), len(files))

	ok := `{"submission_id":"b0c4e95f426f48e2","stage":"build","reason":"bundle_invalid","message":"submission.json is missing"}`
	require.NoError(t, v.Validate("dev.lowbarena.build.failed.v1", []byte(ok)))

	cases := []struct{ name, typ, data, want string }{
		{"missing field", "dev.lowbarena.build.failed.v1", `{"submission_id":"x","stage":"build","reason":"r"}`, "message"},
		{"wrong stage", "dev.lowbarena.build.failed.v1", `{"submission_id":"x","stage":"score","reason":"r","message":"m"}`, "/stage"},
		{"reason not a code", "dev.lowbarena.build.failed.v1", `{"submission_id":"x","stage":"build","reason":"Bad Reason","message":"m"}`, "/reason"},
		{"extra field", "dev.lowbarena.build.started.v1", `{"submission_id":"x","stage":"build","attempt":1,"x":1}`, "x"},
		{"subject with a dot", "dev.lowbarena.build.started.v1", `{"submission_id":"a.b","stage":"build","attempt":1}`, "/submission_id"},
		{"not json", "dev.lowbarena.build.started.v1", `{"submission_id":`, "not JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Validate(tc.typ, []byte(tc.data))
			require.ErrorIs(t, err, schemas.ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	require.ErrorIs(t, v.Validate("dev.lowbarena.nope.v1", []byte(`{}`)), schemas.ErrUnknownType)
}

// A schema's examples must be valid payloads of its type: bustest.Sample
// hands them to tests as such.
func TestSchemaExamplesValidate(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	for _, typ := range v.EventTypes() {
		ex, ok := schemas.Example(typ)
		if !ok {
			continue
		}
		require.NoError(t, v.Validate(typ, ex), "the example of %s", typ)
	}
	_, ok := schemas.Example("dev.lowbarena.nope.v1")
	require.False(t, ok)
}

// TestReferenceOnTheWire: a checkpoint by reference travels in
// submission.received and build.completed as an optional block whose
// repository can carry no credentials and no query, and staging reports
// its progress in bytes.
func TestReferenceOnTheWire(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	received := func(repo string) string {
		return `{"submission_id":"b0c4e95f426f48e2","participant":"p","task_id":"t","split":"dev","track":"engine",
 "solution":{"checkpoint":"c","method":"m"},"submitted_at":"2026-01-02T03:04:05Z",
 "bundle":{"store":"jetstream","bucket":"uploads","object":"o","size":1,"sha256":"` + strings.Repeat("a", 64) + `","files":2},
 "reference":{"repository":"` + repo + `","revision":"main","files":3,"bytes":1000}}`
	}
	built := `{"submission_id":"b0c4e95f426f48e2","bundle_digest":"` + strings.Repeat("b", 64) + `","files":[],"bytes":9,
 "artifact":{"store":"jetstream","bucket":"artifacts","object":"o","size":9,"sha256":"` + strings.Repeat("b", 64) + `","files":0},
 "reference":{"repository":"https://huggingface.co/org/model","revision":"refs/pr/1","files":3,"bytes":1000}}`
	progress := func(unit string) string {
		return `{"job_id":"j","kind":"efficiency","phase":"staging","done":10,"total":20,"unit":"` + unit + `"}`
	}
	cases := []struct {
		name, typ, data string
		ok              bool
	}{
		{"a reference", "dev.lowbarena.submission.received.v1", received("https://huggingface.co/org/model"), true},
		{"credentials in the repository", "dev.lowbarena.submission.received.v1", received("https://me:pw@huggingface.co/org/model"), false},
		{"a token in the query", "dev.lowbarena.submission.received.v1", received("https://huggingface.co/org/model?token=x"), false},
		{"not a URL", "dev.lowbarena.submission.received.v1", received("org/model"), false},
		{"a built reference", "dev.lowbarena.build.completed.v1", built, true},
		{"staging in bytes", "dev.lowbarena.runner.job.progress.v1", progress("bytes"), true},
		{"another unit", "dev.lowbarena.runner.job.progress.v1", progress("furlongs"), false},
	}
	for _, tc := range cases {
		err := v.Validate(tc.typ, []byte(tc.data))
		if tc.ok {
			require.NoError(t, err, tc.name)
			continue
		}
		require.ErrorIs(t, err, schemas.ErrInvalid, tc.name)
	}
}

// TestPatchOnTheWire: an engine patch travels in build.completed and is
// carried forward in contract.completed as its file in the bundle (path,
// size and sha256); a patch without its digest, or with another field,
// is refused.
func TestPatchOnTheWire(t *testing.T) {
	v, err := schemas.Default()
	require.NoError(t, err)
	artifact := `"artifact":{"store":"jetstream","bucket":"artifacts","object":"o","size":9,"sha256":"` + strings.Repeat("b", 64) + `","files":0}`
	built := func(patch string) string {
		return `{"submission_id":"b0c4e95f426f48e2","bundle_digest":"` + strings.Repeat("b", 64) + `","files":[],"bytes":9,` + artifact +
			`,"patch":` + patch + `}`
	}
	// A kept contract: a fixture record's contract block.
	raw, err := os.ReadFile("testdata/lowbarena/submission_qwen3-8b_b0c4e95f426f48e2.json")
	require.NoError(t, err)
	var rec struct {
		Result struct {
			Contract json.RawMessage `json:"contract"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(raw, &rec))
	kept := func(patch string) string {
		return `{"submission_id":"b0c4e95f426f48e2","contract":` + string(rec.Result.Contract) + `,"detected_precision":"W4A16KV8",` + artifact +
			`,"patch":` + patch + `}`
	}
	good := `{"path":"engine.patch","size":42,"sha256":"` + strings.Repeat("c", 64) + `"}`
	noDigest := `{"path":"engine.patch","size":42}`
	extra := `{"path":"engine.patch","size":42,"sha256":"` + strings.Repeat("c", 64) + `","text":"--- a"}`
	cases := []struct {
		name, typ, data string
		ok              bool
	}{
		{"built with a patch", "dev.lowbarena.build.completed.v1", built(good), true},
		{"kept with a patch", "dev.lowbarena.contract.completed.v1", kept(good), true},
		{"kept with a patch without its digest", "dev.lowbarena.contract.completed.v1", kept(noDigest), false},
		{"kept with a patch and its text", "dev.lowbarena.contract.completed.v1", kept(extra), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Validate(tc.typ, []byte(tc.data))
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, schemas.ErrInvalid)
		})
	}
}
