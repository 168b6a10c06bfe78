package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/gateway/pages"
)

// page is a page as a browser gets it.
type pageAnswer struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) page(t *testing.T, path, token string, hdr map[string]string) pageAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return pageAnswer{resp.StatusCode, resp.Header, string(b)}
}

func (f *fixture) putView(t *testing.T, id string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = f.views.Put(context.Background(), id, b)
	require.NoError(t, err)
}

// TestPages: every page and its refusals over HTTP, each as HTML with
// the page's policy, a status and a stable code, saying what is not
// there.
func TestPages(t *testing.T) {
	f := newFixture(t, nil)
	f.putRecord(t, "a-dev", "alice", "dev", time.Unix(100, 0))
	f.putView(t, "round-a", map[string]any{"round_id": "round-a", "campaign": "qwen3-tiny", "status": "running", "candidates": []string{"a-dev"},
		"steps": []map[string]any{{"step": 1, "of": 2, "group": "Setup", "name": "Renting a GPU pod", "phase": "provisioning", "status": "done"}, {"step": 2, "of": 2, "status": "pending"}}})
	for _, tt := range []struct {
		name, path, token string
		status            int
		code              string
		contains          []string
	}{
		{"a dev record, to the public", "/submissions/a-dev", "", 404, string(reason.SubmissionNotFound),
			[]string{"No submission a-dev", "with a token (the address&#39;s #token=...), this page reads it", `data-live="record:a-dev"`}},
		{"a dev record, to another participant", "/submissions/a-dev", f.bob, 404, string(reason.SubmissionNotFound), []string{"Is the id right?"}},
		{"a dev record, to its participant", "/submissions/a-dev", f.alice, 200, "", []string{"Submission <code>a-dev</code>", `data-live="record:a-dev"`}},
		{"a dev record, to an operator", "/submissions/a-dev", f.op, 200, "", []string{"Submission <code>a-dev</code>", html(pages.NoStore)}},
		{"an unknown submission", "/submissions/0000000000000000", f.op, 404, string(reason.SubmissionNotFound), []string{"The arena has no submission 0000000000000000"}},
		{"not an id", "/submissions/a.b", "", 400, string(reason.InvalidID), []string{`&#34;a.b&#34; is not one`}},
		{"a running round, to the public", "/rounds/round-a", "", 200, "",
			[]string{`<span class="st running" id="round-status">running</span>`, "1/2 steps", `data-live="round:round-a"`, "not readable with this token"}},
		{"a round's entry, to its participant", "/rounds/round-a", f.alice, 200, "", []string{`<a href="/participants/alice">alice</a>`}},
		{"an unknown round", "/rounds/round-nope", "", 404, string(reason.RoundNotFound), []string{"The arena has no round round-nope", "arena history --rounds"}},
		{"no page", "/rounds/", "", 404, string(reason.NotFound), []string{"its pages are /rounds/ID"}},
		{"a bad filter", "/leaderboard?qualified=maybe", "", 400, string(reason.InvalidQuery), []string{"qualified is only or all, not &#34;maybe&#34;"}},
		{"no score service", "/leaderboard", "", 503, string(reason.ScoresUnavailable), []string{"No score service answers"}},
		{"a malformed token", "/leaderboard", "lbp_nonsense", 401, string(reason.TokenMalformed), []string{"Token refused", "the token is not an arena token"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := f.page(t, tt.path, tt.token, nil)
			require.Equal(t, tt.status, a.status, a.body)
			require.Equal(t, "text/html; charset=utf-8", a.header.Get("Content-Type"))
			require.Equal(t, pageCSP, a.header.Get("Content-Security-Policy"))
			require.Equal(t, "no-store", a.header.Get("Cache-Control"), "a page depends on the token")
			require.True(t, strings.HasPrefix(a.body, "<!doctype html>"))
			if tt.code != "" {
				require.Contains(t, a.body, `data-code="`+tt.code+`"`)
			}
			for _, s := range tt.contains {
				require.Contains(t, a.body, s)
			}
			require.NotContains(t, a.body, "goroutine")
		})
	}
	// The fragment page.js asks for: the inside of <main> only.
	a := f.page(t, "/submissions/a-dev", f.alice, map[string]string{HeaderFragment: "main"})
	require.Equal(t, http.StatusOK, a.status)
	require.NotContains(t, a.body, "<html")
	require.NotContains(t, a.body, "<main")
	require.Contains(t, a.body, "Submission <code>a-dev</code>")
	require.Contains(t, a.header.Get("Vary"), HeaderFragment)
	require.Equal(t, "200", a.header.Get(HeaderPageStatus))
	// A fragment of an error page is answered 200, its status beside it.
	a = f.page(t, "/submissions/a-dev", "", map[string]string{HeaderFragment: "main"})
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "404", a.header.Get(HeaderPageStatus))
	require.Contains(t, a.body, `data-code="`+string(reason.SubmissionNotFound)+`"`)

	// The leaderboard and a participant's history, from the score
	// service's rows, each row only to who may read it.
	rows := `{"rows":[{"ts_ms":1782900000000,"submission_id":"a-dev","participant":"alice","method":"FP8","split":"dev","score":0.3,"qualified":1},` +
		`{"ts_ms":1782990000000,"submission_id":"b1","participant":"bob","method":"INT4","split":"ranked","ranked":1,"score":0.2,"qualified":1}]}`
	for _, subject := range []string{"lowbarena.ctl.leaderboard", "lowbarena.ctl.history"} {
		sub, err := f.b.Conn().Subscribe(subject, func(m *nats.Msg) {
			var q struct{ Participant string }
			_ = json.Unmarshal(m.Data, &q)
			out := rows
			if q.Participant == "carol" {
				out = `{"rows":[]}`
			}
			_ = m.Respond([]byte(out))
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, f.b.Conn().Flush())
	// b1's record says its figures came from the simulated engine; the
	// score service's rows do not, so the page reads it there.
	simRec, err := json.Marshal(map[string]any{"id": "b1", "participant": "bob", "split": "ranked", "status": "done",
		"result": map[string]any{"simulated": true, "gpu": "NVIDIA H200 (simulated)"}})
	require.NoError(t, err)
	_, err = f.records.Put(context.Background(), "b1", simRec)
	require.NoError(t, err)
	lb := f.page(t, "/leaderboard?ranked=only", "", nil)
	require.Equal(t, http.StatusOK, lb.status)
	require.Contains(t, lb.body, `<tr data-submission="b1"`)
	require.NotContains(t, lb.body, "a-dev", "a dev row is not the public's")
	require.Contains(t, lb.body, "Simulated: 1 of these 1 scores come from a simulated engine on NVIDIA H200 (simulated)")
	lb = f.page(t, "/leaderboard", f.alice, nil)
	require.Contains(t, lb.body, `<tr data-submission="a-dev"`)
	require.Contains(t, lb.body, "Simulated: 1 of these 2 scores")
	require.NotContains(t, lb.body[strings.Index(lb.body, `<tr data-submission="a-dev"`):strings.Index(lb.body, `<tr data-submission="b1"`)], "simtag",
		"a-dev's record does not say simulated")
	h := f.page(t, "/participants/alice", f.alice, nil)
	require.Equal(t, http.StatusOK, h.status)
	require.Contains(t, h.body, `<g class="series" data-name="FP8">`)
	require.Contains(t, h.body, `data-live="participant:alice"`)
	h = f.page(t, "/participants/carol", "", nil)
	require.Equal(t, http.StatusNotFound, h.status)
	require.Contains(t, h.body, `data-code="`+string(reason.ParticipantNotFound)+`"`)
	require.Contains(t, h.body, "The public sees scores of the ranked split only")
}

func html(s string) string { return strings.ReplaceAll(s, "'", "&#39;") }

// TestSubmissionPageFromTheStore: the figures behind a record come from
// the store's rows, laid out as the runner writes them: requests and GPU
// samples of the efficiency job's runs ("<job>-<delivery>/<phase>"),
// beside rows that are not the page's (an earlier delivery, the round's
// SLA job, the quality job's samples).
func TestSubmissionPageFromTheStore(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "chdb://"+filepath.ToSlash(t.TempDir()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	f := newFixture(t, func(o *Options) { o.Store = st })
	const sub, job = "s-telemetry", "eff-0123456789abcdef01234567"
	rec := record.Submission{ID: sub, Participant: "alice", Split: "dev", Status: "done", CreatedAt: time.Unix(100, 0).UTC(),
		Result: record.Result{Simulated: true, GPU: "NVIDIA H200 (simulated)", Efficiency: map[string]float64{"serve": 900},
			Engine: &record.Engine{Budget: map[string]record.Budget{"serve@1.02": {BudgetGiB: 12.24, CapGiB: 16.24, Factor: 1.02, FullRunning: 4, Running: 4, Healthy: true}}}}}
	body, err := json.Marshal(rec)
	require.NoError(t, err)
	_, err = f.records.Put(ctx, sub, body)
	require.NoError(t, err)

	t0 := uint64(time.Date(2026, 9, 17, 12, 0, 0, 0, time.UTC).UnixMilli())
	var reqs []store.Request
	var samples []store.GPUSample
	add := func(jobID, run string, startMs uint64, ttfts []float64, gib float64) {
		for i, ttft := range ttfts {
			reqs = append(reqs, store.Request{TsMs: startMs + uint64(i), SubmissionID: sub, JobID: jobID, RunID: run, Workload: "serve", Seq: uint32(i),
				OutputTokens: 11, TTFTMs: ttft, E2EMs: ttft + 10*float64(i+1), OK: 1, Simulated: 1})
		}
		for i := range 20 {
			samples = append(samples, store.GPUSample{TsMs: startMs + uint64(i)*100, JobID: jobID, RunID: run, Seq: uint64(len(samples)),
				MemUsed: uint64((gib + float64(i)/10) * (1 << 30)), MemTotal: 141 << 30, Simulated: 1})
		}
	}
	add(job, job+"-1/candidate", t0, []float64{900, 900}, 30)              // a delivery that died
	add(job, job+"-2/candidate", t0+60_000, []float64{10, 20, 30, 40}, 10) // the one that counted
	add(job, job+"-2/serve@1.02", t0+90_000, []float64{50}, 11)
	add("sla-aaaa", "sla-aaaa-1/candidate-1", t0+200_000, []float64{700}, 50) // the round's
	require.NoError(t, store.Insert(ctx, st, reqs))
	// The quality job's engine run is named like the candidate's, but
	// it writes no requests: its samples are not the efficiency job's.
	samples = append(samples, store.GPUSample{TsMs: t0, JobID: "qual-x", RunID: "qual-x-1/candidate", MemUsed: 99 << 30, Simulated: 1})
	require.NoError(t, store.Insert(ctx, st, samples))

	a := f.page(t, "/submissions/"+sub, f.alice, nil)
	require.Equal(t, http.StatusOK, a.status, a.body)
	// TTFT p50 of 10, 20, 30, 40 is 25, p99 39.7; TPOT is 10 i / 10 = i ms:
	// p50 of 1, 2, 3, 4 is 2.5.
	require.Contains(t, a.body, `<td class="n ttft">25.0</td><td class="n">39.7</td>`)
	require.Contains(t, a.body, `<td class="n tpot">2.50</td>`)
	require.Contains(t, a.body, `id="memory-candidate"`)
	require.Contains(t, a.body, `id="memory-serve@1.02"`)
	require.Contains(t, a.body, "Measured run: peak 11.900 GiB", "the second delivery's samples, not the first's 30+ GiB")
	require.NotContains(t, a.body, "memory-candidate-1", "the round's run is not the efficiency job's")
	require.Contains(t, a.body, `class="rule budget" data-at="12.24"`)
	require.Contains(t, a.body, `class="rule cap" data-at="16.24"`)
	require.Contains(t, a.body, "simulated: NVIDIA H200 (simulated)")
	require.Equal(t, 2, strings.Count(a.body, `<svg xmlns="http://www.w3.org/2000/svg" id="memory-`))

	// A measured record the store has nothing of says so.
	rec.ID, rec.CreatedAt = "s-none", time.Unix(200, 0).UTC()
	body, err = json.Marshal(rec)
	require.NoError(t, err)
	_, err = f.records.Put(ctx, rec.ID, body)
	require.NoError(t, err)
	a = f.page(t, "/submissions/s-none", f.alice, nil)
	require.Contains(t, a.body, "the store holds no GPU samples of this submission")
}

// TestLiveFilters: the pages follow only what they show.
func TestLiveFilters(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.putRecord(t, "a-dev", "alice", "dev", time.Unix(100, 0))
	f.putRecord(t, "b-ranked", "bob", "ranked", time.Unix(200, 0))
	f.putView(t, "round-a", map[string]any{"round_id": "round-a", "status": "running", "steps": []any{}})
	f.putView(t, "round-b", map[string]any{"round_id": "round-b", "status": "running", "steps": []any{}})
	first := func(ch <-chan [2]string) string {
		select {
		case e := <-ch:
			var v struct{ ID, RoundID string }
			var raw map[string]any
			require.NoError(t, json.Unmarshal([]byte(e[1]), &raw))
			v.ID, _ = raw["id"].(string)
			v.RoundID, _ = raw["round_id"].(string)
			return e[0] + ":" + v.ID + v.RoundID
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return ""
	}
	quiet := func(name string, ch <-chan [2]string) {
		select {
		case e := <-ch:
			t.Fatalf("%s carried %v", name, e)
		case <-time.After(300 * time.Millisecond):
		}
	}
	for _, tt := range []struct {
		query, token string
		want         string
	}{
		{"submission=a-dev", f.alice, "record:a-dev"},
		{"round=round-b", "", "round:round-b"},
		{"participant=bob", f.op, "record:b-ranked"},
		{"participant=alice&only=records", f.alice, "record:a-dev"},
	} {
		t.Run(tt.query, func(t *testing.T) {
			ch := liveAt(t, ctx, f.srv.URL+"/v1/live?"+tt.query, tt.token)
			require.Equal(t, tt.want, first(ch))
			quiet(tt.query, ch)
		})
	}
	// A filtered stream never reveals a record its viewer may not read.
	ch := liveAt(t, ctx, f.srv.URL+"/v1/live?submission=a-dev", f.bob)
	quiet("bob's stream of alice's dev record", ch)
	for _, bad := range []string{"submission=a.b", "only=everything", "round=" + strings.Repeat("x", 200)} {
		st, m, _ := f.get(t, "/v1/live?"+bad, "")
		require.Equal(t, http.StatusBadRequest, st, bad)
		require.Contains(t, []string{string(reason.InvalidQuery)}, code(m), bad)
	}
}
