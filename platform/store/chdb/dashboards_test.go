//go:build !nochdb

package chdbstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
)

// The Grafana dashboards of observability/grafana are tested here, where
// chDB is: each dashboard is read as Grafana reads it, its template
// variables and the ClickHouse plugin's macros are expanded as Grafana and
// the plugin (grafana-clickhouse-datasource, pkg/macros) expand them, and
// every panel's SQL runs against the migrated schema holding rows written
// through store.Insert.

// dashboardsDir is the folder of the dashboards, from this package.
const dashboardsDir = "../../../observability/grafana/dashboards"

// datasourceUID and datasourceType are the data source every panel names:
// the one observability/grafana/provisioning/datasources/clickhouse.yaml
// provisions.
const (
	datasourceUID  = "lowbarena-clickhouse"
	datasourceType = "grafana-clickhouse-datasource"
)

// dashboard is what these tests read of a Grafana dashboard's JSON.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string      `json:"name"`
	Type       string      `json:"type"`
	Query      string      `json:"query"`
	Datasource *datasource `json:"datasource"`
	IncludeAll bool        `json:"includeAll"`
	Multi      bool        `json:"multi"`
}

type panel struct {
	ID         int         `json:"id"`
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
		EditorType string      `json:"editorType"`
		Format     *int        `json:"format"`
		RawSQL     string      `json:"rawSql"`
	} `json:"targets"`
}

// check returns what makes d something Grafana would not load as the
// arena's dashboard, or nil.
func (d *dashboard) check() error {
	switch {
	case d.UID == "":
		return fmt.Errorf("no uid")
	case d.Title == "":
		return fmt.Errorf("no title")
	case d.SchemaVersion < 36:
		return fmt.Errorf("schemaVersion %d: want 36 or later (data sources named by uid)", d.SchemaVersion)
	case len(d.Panels) == 0:
		return fmt.Errorf("no panels")
	}
	ids := map[int]bool{}
	ours := func(ds *datasource) bool { return ds != nil && ds.Type == datasourceType && ds.UID == datasourceUID }
	for _, v := range d.Templating.List {
		if v.Type == "query" && (!ours(v.Datasource) || v.Query == "") {
			return fmt.Errorf("variable %s: a query on the %s data source", v.Name, datasourceUID)
		}
	}
	for _, p := range d.Panels {
		if p.ID == 0 || ids[p.ID] {
			return fmt.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.Type == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			return fmt.Errorf("panel %d: a title, a type and a grid position", p.ID)
		}
		if !ours(p.Datasource) {
			return fmt.Errorf("panel %q: data source %+v, want %s (%s)", p.Title, p.Datasource, datasourceUID, datasourceType)
		}
		if p.Type == "text" {
			continue
		}
		if len(p.Targets) == 0 {
			return fmt.Errorf("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || !ours(tg.Datasource) || tg.EditorType != "sql" || tg.Format == nil || tg.RawSQL == "" {
				return fmt.Errorf("panel %q target %q: refId, the data source, editorType sql, a format and rawSql", p.Title, tg.RefID)
			}
		}
	}
	return nil
}

// queryRange is the dashboard's time range and interval in a test.
type queryRange struct {
	From, To time.Time
	Interval time.Duration
}

// macroCall matches a plugin macro: $__name, with its arguments when a
// parenthesis follows.
var macroCall = regexp.MustCompile(`\$__(\w+)`)

// expandMacros expands the plugin's macros in sql as pkg/macros does: the
// same names, the same SQL for each (toDateTime(seconds),
// fromUnixTimestamp64Milli(ms), toStartOfInterval(..., INTERVAL n second)).
// Arguments are split on the commas outside parentheses.
func expandMacros(sql string, r queryRange) (string, error) {
	var out strings.Builder
	for {
		loc := macroCall.FindStringSubmatchIndex(sql)
		if loc == nil {
			out.WriteString(sql)
			return out.String(), nil
		}
		out.WriteString(sql[:loc[0]])
		name := sql[loc[2]:loc[3]]
		rest := sql[loc[1]:]
		var args []string
		if strings.HasPrefix(rest, "(") {
			depth, end := 0, -1
			start := 1
			for i, c := range rest {
				switch c {
				case '(':
					depth++
				case ')':
					depth--
				case ',':
					if depth == 1 {
						args = append(args, strings.TrimSpace(rest[start:i]))
						start = i + 1
					}
				}
				if depth == 0 {
					end = i
					break
				}
			}
			if end < 0 {
				return "", fmt.Errorf("$__%s: unbalanced parentheses", name)
			}
			if a := strings.TrimSpace(rest[start:end]); a != "" || len(args) > 0 {
				args = append(args, a)
			}
			rest = rest[end+1:]
		}
		want := func(n int) error {
			if len(args) != n {
				return fmt.Errorf("$__%s expected %d argument(s), received %d", name, n, len(args))
			}
			return nil
		}
		dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
		dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
		secs := int(math.Max(r.Interval.Seconds(), 1))
		var exp string
		switch name {
		case "fromTime":
			exp = dt(r.From)
		case "toTime":
			exp = dt(r.To)
		case "fromTime_ms":
			exp = dt64(r.From)
		case "toTime_ms":
			exp = dt64(r.To)
		case "interval_s":
			exp = fmt.Sprint(secs)
		case "timeFilter", "timeFilter_ms":
			if err := want(1); err != nil {
				return "", err
			}
			f := dt
			if name == "timeFilter_ms" {
				f = dt64
			}
			exp = fmt.Sprintf("%s >= %s AND %s <= %s", args[0], f(r.From), args[0], f(r.To))
		case "timeInterval":
			if err := want(1); err != nil {
				return "", err
			}
			exp = fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", args[0], secs)
		case "timeInterval_ms":
			if err := want(1); err != nil {
				return "", err
			}
			exp = fmt.Sprintf("toStartOfInterval(toDateTime64(%s, 3), INTERVAL %d millisecond)", args[0], max(r.Interval.Milliseconds(), 1))
		default:
			return "", fmt.Errorf("$__%s is not a macro of the ClickHouse plugin", name)
		}
		out.WriteString(exp)
		sql = rest
	}
}

// varRef matches a template variable as Grafana writes it: ${name},
// ${name:format} or $name (not the plugin's $__ macros).
var varRef = regexp.MustCompile(`\$\{(\w+)(?::(\w+))?\}|\$([A-Za-z]\w*)`)

// expandVars replaces the template variables in sql with their values, as
// Grafana does before the plugin sees the query: singlequote quotes each
// value and joins them with commas; no format joins them with commas.
func expandVars(sql string, values map[string][]string) (string, error) {
	var err error
	out := varRef.ReplaceAllStringFunc(sql, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name, format := sub[1], sub[2]
		if name == "" {
			name = sub[3]
		}
		vs, ok := values[name]
		if !ok {
			err = fmt.Errorf("the dashboard has no variable %q", name)
			return m
		}
		switch format {
		case "singlequote":
			q := make([]string, len(vs))
			for i, v := range vs {
				q[i] = "'" + strings.ReplaceAll(v, "'", `\'`) + "'"
			}
			return strings.Join(q, ",")
		case "", "csv":
			return strings.Join(vs, ",")
		default:
			err = fmt.Errorf("variable %s: format %q is not one these dashboards use", name, format)
			return m
		}
	})
	return out, err
}

// resolve runs each query variable's query, in order (a variable may use
// those before it), and takes all its values, as the variable's "All"
// does; a variable with no value is given one that matches nothing (as
// Grafana does with an empty "All").
func resolve(ctx context.Context, st store.Tabler, d *dashboard, r queryRange) (map[string][]string, error) {
	values := map[string][]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		t, err := run(ctx, st, v.Query, values, r)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		var vs []string
		for _, row := range t.Rows {
			var s string
			if err := json.Unmarshal(row[0], &s); err != nil {
				return nil, fmt.Errorf("variable %s: value %s is not a string", v.Name, row[0])
			}
			vs = append(vs, s)
		}
		if len(vs) == 0 {
			vs = []string{""}
		}
		values[v.Name] = vs
	}
	return values, nil
}

// run expands sql and runs it read-only.
func run(ctx context.Context, st store.Tabler, sql string, values map[string][]string, r queryRange) (*store.Table, error) {
	q, err := expandVars(sql, values)
	if err != nil {
		return nil, err
	}
	if q, err = expandMacros(q, r); err != nil {
		return nil, err
	}
	t, err := st.QueryTable(ctx, q, store.Limits{MaxRows: 10000, MaxBytes: 8 << 20, MaxSeconds: 30, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, q)
	}
	return t, nil
}

// panelResult is a panel's rows, each a map of column to value as JSON
// decodes it (numbers float64).
type panelResult []map[string]any

// runDashboard checks d and runs every target of every panel, returning
// the rows of each panel by title (its first target's).
func runDashboard(ctx context.Context, st store.Tabler, d *dashboard, r queryRange) (map[string]panelResult, error) {
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("dashboard %q: %w", d.UID, err)
	}
	values, err := resolve(ctx, st, d, r)
	if err != nil {
		return nil, err
	}
	out := map[string]panelResult{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			t, err := run(ctx, st, tg.RawSQL, values, r)
			if err != nil {
				return nil, fmt.Errorf("panel %q target %s: %w", p.Title, tg.RefID, err)
			}
			if i > 0 {
				continue
			}
			var rows panelResult
			for _, row := range t.Rows {
				m := map[string]any{}
				for j, c := range t.Columns {
					var v any
					if err := json.Unmarshal(row[j], &v); err != nil {
						return nil, err
					}
					m[c.Name] = v
				}
				rows = append(rows, m)
			}
			out[p.Title] = rows
		}
	}
	return out, nil
}

func readDashboard(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dashboardsDir, name))
	require.NoError(t, err)
	return raw
}

func parseDashboard(t *testing.T, raw []byte) *dashboard {
	t.Helper()
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	return &d
}

const gib = 1 << 30

// t0 is the rows' time: the dashboards' range is the hour around it.
var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func ms(d time.Duration) uint64 { return uint64(t0.Add(d).UnixMilli()) }

// seed writes the rows every panel is checked against: two GPUs on two
// pods (one simulated), the efficiency job of submission sub-a with its
// requests, sub-a through every stage (its score's result written twice,
// as a redelivery writes it), sub-b refused by the contract, a score and a
// round of two steps.
func seed(ctx context.Context, t *testing.T, st store.Store) {
	t.Helper()
	samples := []store.GPUSample{
		{TsMs: ms(0), Pod: "pod-0", GPU: 0, GPUUUID: "sim-0", RunID: "eff-a-1/candidate", JobID: "eff-a", Seq: 1, MemUsed: 10 * gib, MemTotal: 141 * gib, ProcMem: 8 * gib, Util: 0.5, Power: 300, Simulated: 1},
		{TsMs: ms(100 * time.Millisecond), Pod: "pod-0", GPU: 0, GPUUUID: "sim-0", RunID: "eff-a-1/candidate", JobID: "eff-a", Seq: 2, MemUsed: 12 * gib, MemTotal: 141 * gib, ProcMem: 9 * gib, Util: 0.9, Power: 500, Simulated: 1},
		{TsMs: ms(200 * time.Millisecond), Pod: "pod-0", GPU: 0, GPUUUID: "sim-0", RunID: "eff-a-1/candidate", JobID: "eff-a", Seq: 3, MemUsed: 11 * gib, MemTotal: 141 * gib, ProcMem: 8 * gib, Util: 0.7, Power: 400, Simulated: 1},
		{TsMs: ms(0), Pod: "pod-1", GPU: 1, GPUUUID: "GPU-1", RunID: "q-b-1/candidate", JobID: "q-b", Seq: 1, MemUsed: 20 * gib, MemTotal: 141 * gib, ProcMem: 19 * gib, Util: 1, Power: 650, Simulated: 0},
		{TsMs: ms(100 * time.Millisecond), Pod: "pod-1", GPU: 1, GPUUUID: "GPU-1", RunID: "q-b-1/candidate", JobID: "q-b", Seq: 2, MemUsed: 30 * gib, MemTotal: 141 * gib, ProcMem: 29 * gib, Util: 1, Power: 700, Simulated: 0},
		// Outside the range: in no panel.
		{TsMs: ms(-3 * time.Hour), Pod: "pod-0", GPU: 0, GPUUUID: "sim-0", RunID: "old-1/candidate", JobID: "old", Seq: 1, MemUsed: 100 * gib, MemTotal: 141 * gib, ProcMem: 99 * gib, Simulated: 1},
	}
	require.NoError(t, store.Insert(ctx, st, samples))
	require.NoError(t, store.Insert(ctx, st, []store.Request{
		{TsMs: ms(0), SubmissionID: "sub-a", JobID: "eff-a", RunID: "eff-a-1/candidate", Workload: "chat", Seq: 1, OK: 1, Simulated: 1},
		{TsMs: ms(0), SubmissionID: "sub-a", JobID: "eff-a", RunID: "eff-a-1/candidate", Workload: "chat", Seq: 2, OK: 1, Simulated: 1},
	}))
	stage := func(sub, name, status, reason string, end time.Duration) store.StageResult {
		return store.StageResult{TsMs: ms(end), SubmissionID: sub, Stage: name, Status: status, Reason: reason, EventID: sub + "-" + name, FinishedMs: ms(end)}
	}
	results := []store.StageResult{
		stage("sub-a", "build", "done", "", time.Second),
		stage("sub-a", "contract", "done", "", 3*time.Second),
		stage("sub-a", "quality", "done", "", 10*time.Second),
		stage("sub-a", "efficiency", "done", "", 8*time.Second),
		stage("sub-a", "score", "done", "", 12*time.Second),
		stage("sub-b", "build", "done", "", time.Second),
		stage("sub-b", "contract", "failed", "contract_mismatch", 2*time.Second),
	}
	require.NoError(t, store.Insert(ctx, st, results))
	require.NoError(t, store.Insert(ctx, st, results[4:5]), "a redelivered score.completed writes its row again")
	require.NoError(t, store.Insert(ctx, st, []store.Score{
		{TsMs: ms(12 * time.Second), SubmissionID: "sub-a", Policy: "lowb-score/v1", Campaign: "c", TaskID: "c", Participant: "team", Split: "dev", Score: 0.8, Qualified: 1},
	}))
	require.NoError(t, store.Insert(ctx, st, []store.RoundStep{
		{TsMs: ms(20 * time.Second), RoundID: "r1", Step: 1, Name: "lease", Phase: "setup", Status: "done", StartedMs: ms(18 * time.Second), FinishedMs: ms(20 * time.Second)},
		{TsMs: ms(25 * time.Second), RoundID: "r1", Step: 2, Name: "baseline", Phase: "baseline", Status: "failed", StartedMs: ms(20 * time.Second), FinishedMs: ms(25 * time.Second)},
	}))
}

// The dashboards as written: valid, every panel's SQL runs, and the GPU
// memory, stage outcome, latency and GPU-hours panels give the rows the
// seeded telemetry and history imply.
func TestDashboardsRunOnTheSchema(t *testing.T) {
	ctx := context.Background()
	st := opener(t.TempDir())(t)
	tab, ok := st.(store.Tabler)
	require.True(t, ok)
	seed(ctx, t, st)
	r := queryRange{From: t0.Add(-time.Hour), To: t0.Add(time.Hour), Interval: time.Minute}

	gpu, err := runDashboard(ctx, tab, parseDashboard(t, readDashboard(t, "gpu.json")), r)
	require.NoError(t, err)
	require.Equal(t, panelResult{
		{"time": "2026-12-04 12:00:00", "gpu_name": "pod-0 gpu 0 (simulated)", "mem_used": float64(12 * gib)},
		{"time": "2026-12-04 12:00:00", "gpu_name": "pod-1 gpu 1", "mem_used": float64(30 * gib)},
	}, sortRows(gpu["GPU memory used per GPU"], "gpu_name"))
	require.Equal(t, panelResult{
		{"job_id": "q-b", "pod": "pod-1", "gpu": float64(1), "source": "nvml", "peak_mem_used": float64(30 * gib), "peak_proc_mem": float64(29 * gib), "mem_total": float64(141 * gib), "samples": float64(2)},
		{"job_id": "eff-a", "pod": "pod-0", "gpu": float64(0), "source": "simulated", "peak_mem_used": float64(12 * gib), "peak_proc_mem": float64(9 * gib), "mem_total": float64(141 * gib), "samples": float64(3)},
	}, gpu["GPU memory peak per job"])
	require.Equal(t, panelResult{
		{"submission_id": "sub-a", "source": "simulated", "peak_mem_used": float64(12 * gib), "peak_proc_mem": float64(9 * gib)},
	}, gpu["GPU memory peak per submission"])
	hours := gpu["GPU-hours sampled per pod"]
	require.Len(t, hours, 2)
	require.Equal(t, "pod-0", hours[0]["pod"])
	require.Equal(t, "simulated", hours[0]["source"])
	require.InDelta(t, 0.2/3600, hours[0]["gpu_hours"], 1e-12, "200 ms of samples on pod-0's GPU")
	require.InDelta(t, 0.1/3600, hours[1]["gpu_hours"], 1e-12)
	util := sortRows(gpu["GPU utilisation"], "gpu_name")
	require.InDelta(t, 70, util[0]["util_percent"], 1e-9, "the mean of 0.5, 0.9 and 0.7")
	require.InDelta(t, 400, sortRows(gpu["GPU power"], "gpu_name")[0]["power_watts"], 1e-9)

	pipe, err := runDashboard(ctx, tab, parseDashboard(t, readDashboard(t, "pipeline.json")), r)
	require.NoError(t, err)
	require.Equal(t, panelResult{
		{"stage": "build", "status": "done", "submissions": float64(2)},
		{"stage": "contract", "status": "done", "submissions": float64(1)},
		{"stage": "contract", "status": "failed", "submissions": float64(1)},
		{"stage": "efficiency", "status": "done", "submissions": float64(1)},
		{"stage": "quality", "status": "done", "submissions": float64(1)},
		{"stage": "score", "status": "done", "submissions": float64(1)},
	}, pipe["Submissions per stage and outcome"])
	outcomes := map[string]float64{}
	for _, row := range pipe["Stage outcomes over time"] {
		outcomes[row["outcome"].(string)] += row["stages"].(float64)
	}
	require.Equal(t, map[string]float64{"build done": 2, "contract done": 1, "contract failed": 1, "quality done": 1, "efficiency done": 1, "score done": 1},
		outcomes, "the score's second row is the same result: counted once (FINAL)")
	require.Equal(t, panelResult{{"stage": "contract", "reason": "contract_mismatch", "submissions": float64(1)}}, pipe["Refusals by stage and reason"])
	latency := map[string]float64{}
	for _, row := range pipe["Stage latency"] {
		latency[row["stage"].(string)] = row["seconds"].(float64)
	}
	require.Equal(t, map[string]float64{"contract": 2, "quality": 7, "efficiency": 5, "score": 2}, latency)
	require.Len(t, pipe["Latest scores"], 1)
	require.InDelta(t, 0.8, pipe["Latest scores"][0]["score"], 1e-12)
	require.Equal(t, panelResult{{"round_id": "r1", "steps": float64(2), "done": float64(1), "failed": float64(1), "seconds": float64(7)}}, pipe["Rounds"])
	require.Len(t, pipe["Runner GPU-hours"], 2)
}

// sortRows orders rows by a string column.
func sortRows(rows panelResult, col string) panelResult {
	out := append(panelResult(nil), rows...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j][col].(string) < out[j-1][col].(string); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// A dashboard that names what the schema lacks, or that Grafana or the
// plugin would not take, fails: each case a mutated copy of gpu.json.
func TestDashboardsRefuseWhatTheSchemaLacks(t *testing.T) {
	ctx := context.Background()
	st := opener(t.TempDir())(t)
	tab, ok := st.(store.Tabler)
	require.True(t, ok)
	seed(ctx, t, st)
	r := queryRange{From: t0.Add(-time.Hour), To: t0.Add(time.Hour), Interval: time.Minute}
	raw := string(readDashboard(t, "gpu.json"))
	for _, tt := range []struct {
		name, old, new, want string
	}{
		{"as written", "", "", ""},
		{"a missing column", "max(mem_used) AS peak_mem_used", "max(mem_peak) AS peak_mem_used", "mem_peak"},
		{"a missing table", "FROM gpu_samples FINAL", "FROM gpu_telemetry FINAL", "gpu_telemetry"},
		{"a variable the dashboard lacks", "${job:singlequote}", "${submission:singlequote}", `no variable "submission"`},
		{"a macro the plugin lacks", "$__timeInterval(ts_ms / 1000)", "$__timeBucket(ts_ms / 1000)", "$__timeBucket is not a macro"},
		{"a macro without its argument", "$__timeInterval(ts_ms / 1000)", "$__timeInterval()", "expected 1 argument(s), received 0"},
		{"another data source", `"uid": "lowbarena-clickhouse"`, `"uid": "prometheus"`, "data source"},
		{"no uid", `"uid": "lowbarena-gpu"`, `"uid": ""`, "no uid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mutated := raw
			if tt.old != "" {
				require.Contains(t, raw, tt.old, "the case must change the dashboard")
				mutated = strings.Replace(raw, tt.old, tt.new, 1)
			}
			_, err := runDashboard(ctx, tab, parseDashboard(t, []byte(mutated)), r)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// Every panel names the data source the provisioning file creates.
func TestDashboardsNameTheProvisionedDataSource(t *testing.T) {
	prov, err := os.ReadFile("../../../observability/grafana/provisioning/datasources/clickhouse.yaml")
	require.NoError(t, err)
	require.Contains(t, string(prov), "uid: "+datasourceUID)
	require.Contains(t, string(prov), "type: "+datasourceType)
	entries, err := os.ReadDir(dashboardsDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		require.NoError(t, parseDashboard(t, readDashboard(t, e.Name())).check(), e.Name())
	}
	require.ElementsMatch(t, []string{"gpu.json", "pipeline.json"}, names)
}
