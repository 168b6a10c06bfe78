package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/score"
)

// BenchmarkScoresCLIScale is the scale curve of `arena leaderboard`,
// `arena history` and `arena show` as a person runs them: a connection
// to NATS, the question, the answer and its rendering, against the real
// score service on chDB holding 1,000, 10,000 and 100,000 scores (4
// campaigns, 200 participants, 1 KB payloads as the score events carry)
// and a records bucket holding as many records (the gateway's fixture
// record, 6.4 KB; 100,000 records only with LOWBARENA_BENCH_100K=1,
// otherwise `show` is run at 1,000 and 10,000):
//
//   - leaderboard: every score of one campaign (a quarter of the rows),
//     printed; the answer grows with the rows, so linear is its floor;
//   - history/all: every score, printed, in chunks past one message;
//   - history/participant: one participant's (1/200 of the rows);
//   - show: one record, read by key and rendered.
//
// Each reports ms/op and ns per row (or record) held.
func BenchmarkScoresCLIScale(b *testing.B) {
	b.Setenv(EnvData, b.TempDir())
	bs, srv := bustest.Bus(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	dir, err := os.MkdirTemp("", "scores-cli-scale-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	st, err := store.Open(ctx, "chdb://"+dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if _, err := store.Migrate(ctx, st); err != nil {
		b.Fatal(err)
	}
	const policy = "lowb-score/v1"
	s, err := score.New(ctx, bs, slog.New(slog.NewTextHandler(io.Discard, nil)), score.Options{Store: st, Policy: policy})
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range s.Actors() {
		go func() { _ = a.Run(ctx) }()
	}
	tmpl, err := os.ReadFile("../../services/gateway/api/testdata/record.json")
	if err != nil {
		b.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(tmpl, &rec); err != nil {
		b.Fatal(err)
	}
	payload := `{"detail":"` + fmt.Sprintf("%01000d", 0) + `"}`
	held, records := 0, 0
	fill := func(n int) {
		rows := make([]store.Score, 0, n-held)
		for i := held; i < n; i++ {
			rows = append(rows, store.Score{TsMs: 1_760_000_000_000 + uint64(i)*1000, SubmissionID: fmt.Sprintf("%016x", i+1), Policy: policy,
				Campaign: fmt.Sprintf("campaign-%d", i%4), TaskID: "task", Participant: fmt.Sprintf("p%03d", i%200), Method: []string{"FP8", "INT4", "NVFP4"}[i%3],
				Split: "ranked", Score: float64(i%1000) / 1000, EfficiencyGain: 1.5, Drift: 0.01, Qualified: uint8(i % 2), Ranked: 1, Payload: payload})
		}
		for len(rows) > 0 {
			k := min(len(rows), 10_000)
			if err := store.Insert(ctx, st, rows[:k]); err != nil {
				b.Fatal(err)
			}
			rows = rows[k:]
		}
		held = n
		if n > 10_000 && os.Getenv("LOWBARENA_BENCH_100K") != "1" {
			return
		}
		var last jetstream.PubAckFuture
		for i := records; i < n; i++ {
			id := fmt.Sprintf("%016x", i+1)
			rec["id"], rec["participant"], rec["created_at"] = id, "p"+strconv.Itoa(i%200), time.Unix(1760000000+int64(i), 0).UTC()
			body, err := json.Marshal(rec)
			if err != nil {
				b.Fatal(err)
			}
			if last, err = bs.JetStream().PublishAsync("$KV."+bus.BucketSubmissions+"."+id, body); err != nil {
				b.Fatal(err)
			}
		}
		if last != nil {
			select {
			case <-last.Ok():
			case err := <-last.Err():
				b.Fatal(err)
			}
		}
		records = n
	}
	run := func(cmd func(context.Context, []string, io.Writer, io.Writer) error, args ...string) func() {
		return func() {
			if err := cmd(ctx, append([]string{"--nats", srv.ClientURL()}, args...), io.Discard, io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, n := range []int{1000, 10_000, 100_000} {
		fill(n)
		cases := []struct {
			name string
			op   func()
		}{
			{"leaderboard", run(cmdLeaderboard, "--campaign", "campaign-1")},
			{"history/all", run(cmdHistory)},
			{"history/participant", run(cmdHistory, "--participant", "p007")},
		}
		if records == n {
			cases = append(cases, struct {
				name string
				op   func()
			}{"show", run(cmdShow, fmt.Sprintf("%016x", n/2))})
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/rows=%d", c.name, n), func(b *testing.B) {
				c.op()
				for b.Loop() {
					c.op()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row")
			})
		}
	}
}
