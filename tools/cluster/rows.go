package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/events"
)

// SQL runs a read-only statement through `arena sql --json` (the score
// service's query service, against the ClickHouse server) and returns
// its rows, each value as a string.
func (c *Cluster) SQL(ctx context.Context, stmt string) ([][]string, error) {
	out, err := c.Arena(ctx, "sql", "--json", "--max-rows", "10000", stmt)
	if err != nil {
		return nil, err
	}
	var rep struct {
		Rows      [][]json.RawMessage `json:"rows"`
		Truncated string              `json:"truncated"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return nil, fmt.Errorf("cluster: arena sql: %w", err)
	}
	if rep.Truncated != "" {
		return nil, fmt.Errorf("cluster: arena sql: the answer was cut (%s): %s", rep.Truncated, stmt)
	}
	rows := make([][]string, len(rep.Rows))
	for i, r := range rep.Rows {
		for _, v := range r {
			var s string
			if json.Unmarshal(v, &s) != nil {
				s = string(v) // a number: ClickHouse quotes only 64-bit integers
			}
			rows[i] = append(rows[i], s)
		}
	}
	return rows, nil
}

// Rows is what the store holds against what the event log says it
// should.
type Rows struct {
	// Checked counts the rows looked for.
	Checked int
	// Lost lists rows the log calls for that the store lacks.
	Lost []string
	// Duplicated lists natural keys held more than once after FINAL
	// (the replacing key collapses a row written twice).
	Duplicated []string
	// Collapsed counts the copies that were written more than once and
	// collapse under FINAL: retried inserts.
	Collapsed int
}

// CheckRows holds the store to the log: a scores row for every
// score.completed (submission and policy), a stage_results row for every
// stage outcome (its event id), GPU samples for every completed job, the
// three workloads' request rows for every completed efficiency or SLA
// job, a round_steps row for every ended round step; and no natural key
// twice under FINAL.
func (c *Cluster) CheckRows(ctx context.Context, l Ledger, jobs map[string]*JobRun) (Rows, error) {
	var r Rows
	set := func(stmt string) (map[string]int, error) {
		rows, err := c.SQL(ctx, stmt)
		if err != nil {
			return nil, err
		}
		m := map[string]int{}
		for _, row := range rows {
			n, err := strconv.Atoi(row[len(row)-1])
			if err != nil {
				return nil, fmt.Errorf("cluster: %s: count %q", stmt, row[len(row)-1])
			}
			m[strings.Join(row[:len(row)-1], "/")] += n
		}
		return m, nil
	}
	want := func(have map[string]int, key, what string) {
		r.Checked++
		if have[key] == 0 {
			r.Lost = append(r.Lost, what+" "+key)
		}
	}

	scores, err := set("SELECT submission_id, policy, count() FROM scores FINAL GROUP BY submission_id, policy")
	if err != nil {
		return r, err
	}
	steps, err := set("SELECT event_id, count() FROM stage_results FINAL GROUP BY event_id")
	if err != nil {
		return r, err
	}
	rounds, err := set("SELECT round_id, toString(step), count() FROM round_steps FINAL GROUP BY round_id, step")
	if err != nil {
		return r, err
	}
	for _, e := range l.Events {
		spec, _ := events.Lookup(events.Type(e.Type))
		switch {
		case events.Type(e.Type) == events.ScoreCompleted:
			var d struct {
				DevScore struct {
					Policy string `json:"policy"`
				} `json:"dev_score"`
			}
			_ = json.Unmarshal(e.Data, &d)
			want(scores, e.Subject+"/"+d.DevScore.Policy, "scores")
		case spec.Stage != "" && spec.Verb != "started":
			want(steps, e.ID, "stage_results of "+e.Type+" "+e.Subject)
		case events.Type(e.Type) == events.RoundStep:
			var st events.RoundStepData
			_ = json.Unmarshal(e.Data, &st)
			if st.Status != events.StepRunning && st.StartedAt != nil && st.FinishedAt != nil {
				want(rounds, fmt.Sprintf("%s/%d", e.Subject, st.Step), "round_steps")
			}
		}
	}
	samples, err := set("SELECT job_id, count() FROM gpu_samples GROUP BY job_id")
	if err != nil {
		return r, err
	}
	workloads, err := set("SELECT job_id, workload, count() FROM requests FINAL GROUP BY job_id, workload")
	if err != nil {
		return r, err
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		j := jobs[id]
		if j.Outcome != "completed" {
			continue
		}
		want(samples, id, "gpu_samples of job")
		if j.Kind == events.JobEfficiency || j.Kind == events.JobSLA {
			for _, w := range []string{"serve", "interactive", "long_context"} {
				want(workloads, id+"/"+w, "requests of job")
			}
		}
	}

	// No natural key twice under FINAL, and how many copies FINAL
	// collapsed.
	for _, q := range []struct{ table, key string }{
		{"scores", "submission_id, policy"},
		{"stage_results", "submission_id, stage, event_id"},
		{"round_steps", "round_id, step"},
		{"gpu_samples", "job_id, run_id, gpu, seq"},
		{"requests", "job_id, run_id, workload, seq"},
		{"quality_items", "campaign, suite_version, submission_id, domain, item_id, sample"},
	} {
		dup, err := c.SQL(ctx, fmt.Sprintf("SELECT count() FROM (SELECT %s, count() AS n FROM %s FINAL GROUP BY %s HAVING n > 1)", q.key, q.table, q.key))
		if err != nil {
			return r, err
		}
		if n, _ := strconv.Atoi(dup[0][0]); n > 0 {
			r.Duplicated = append(r.Duplicated, fmt.Sprintf("%s: %d keys twice under FINAL", q.table, n))
		}
		cnt, err := c.SQL(ctx, fmt.Sprintf("SELECT (SELECT count() FROM %s) - (SELECT count() FROM %s FINAL)", q.table, q.table))
		if err != nil {
			return r, err
		}
		n, _ := strconv.Atoi(cnt[0][0])
		r.Collapsed += n
	}
	return r, nil
}
