package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/gateway/pages"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
	"github.com/lowbarena/lowbarena/services/gateway/timeline"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

// BenchmarkListSubmissionsScale is the scale curve of what the gateway
// reads from the records bucket as it grows: the bucket holds 1,000 then
// 10,000 records (100,000 with LOWBARENA_BENCH_100K=1: 640 MB of
// records), each the fixture record of testdata (6.4 KB, as the projector
// writes them) with its own id, participant and time. At each size, as an
// operator:
//
//   - list/index: GET /v1/submissions?limit=50 through the timeline index
//     (the gateway as it runs);
//   - list/scan: the same without the index (every record read; the list
//     before the index, and while it is being built);
//   - page/submission: GET /submissions/{id}, a record's page drawn on the
//     server (no store: no telemetry plots);
//   - page/leaderboard: GET /leaderboard with as many scores as records,
//     from a score endpoint in this process answering in chunks (the
//     gateway's draw, not the store's query: see score's
//     BenchmarkScoresScale and arena's BenchmarkScoresCLIScale); it draws
//     the first pages.MaxLeaderboardRows;
//   - live/first: GET /v1/live?only=records until it has sent every
//     record, what the live page (/) received before its list was whole;
//   - live/recent: the same with recent=200, as the live page asks now.
//
// Each reports ms/op and that time per record held (ns/record): a flat
// ns/record is a linear curve, a falling one sub-linear.
func BenchmarkListSubmissionsScale(b *testing.B) {
	sizes := []int{1000, 10000}
	if os.Getenv("LOWBARENA_BENCH_100K") == "1" {
		sizes = append(sizes, 100000)
	}
	tmpl, err := os.ReadFile("testdata/record.json")
	if err != nil {
		b.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(tmpl, &rec); err != nil {
		b.Fatal(err)
	}
	bs, _ := bustest.Bus(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	kv := func(name string) jetstream.KeyValue {
		k, err := bs.JetStream().KeyValue(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	records := kv(bus.BucketSubmissions)
	reg := participants.New(kv(bus.BucketParticipants), participants.Options{Hash: participant.HashParams{Memory: 64, Time: 1, Threads: 1, KeyLen: 32}})
	op, _, err := reg.Add(ctx, "ops", participant.KindOperator, participant.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	o := Options{Records: records, Views: kv(bus.BucketRoundViews), Registry: reg, Ledger: usage.New(kv(bus.BucketUsage), nil),
		Bus: bs, NC: bs.Conn(), Defaults: testQuotas, Spool: b.TempDir(), WriteTimeout: 5 * time.Minute}
	serve := func(o Options) string {
		a, err := New(o)
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(a)
		b.Cleanup(srv.Close)
		return srv.URL
	}
	scan := serve(o)
	idx := timeline.New(records)
	go func() { _ = idx.Run(ctx) }()
	o.Index = idx
	indexed := serve(o)

	// The score service's answer: as many rows as records, best first.
	var scores []ctl.Row
	svc, err := micro.AddService(bs.Conn(), micro.Config{Name: "scores-bench", Version: "1.0.0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Stop() })
	if err := ctl.RowsEndpoint(ctx, svc, bs.Conn(), "leaderboard", ctl.SubjectLeaderboard, time.Minute, 0,
		func(context.Context, ctl.Query) ([]ctl.Row, error) { return scores, nil }); err != nil {
		b.Fatal(err)
	}

	// fill puts records up to n, published without waiting for each
	// acknowledgement (the bucket is a stream: $KV.<bucket>.<key>).
	held := 0
	t0 := time.Unix(1760000000, 0).UTC()
	fill := func(n int) {
		var last jetstream.PubAckFuture
		for i := held; i < n; i++ {
			id := fmt.Sprintf("%016x", i+1)
			rec["id"], rec["participant"], rec["created_at"] = id, "p"+strconv.Itoa(i%97), t0.Add(time.Duration(i)*time.Second)
			body, err := json.Marshal(rec)
			if err != nil {
				b.Fatal(err)
			}
			if last, err = bs.JetStream().PublishAsync("$KV."+bus.BucketSubmissions+"."+id, body); err != nil {
				b.Fatal(err)
			}
			scores = append(scores, ctl.Row{TsMs: uint64(t0.Add(time.Duration(i) * time.Second).UnixMilli()), SubmissionID: id, Participant: "p" + strconv.Itoa(i%97),
				Method: "GPTQ INT4 w4a16 g128", Campaign: "qwen3-8b", Policy: "lowb-score/v1", Split: "ranked", Ranked: 1, Qualified: 1, Score: float64(n-i) / float64(n)})
		}
		if last != nil {
			select {
			case <-last.Ok():
			case err := <-last.Err():
				b.Fatal(err)
			}
		}
		held = n
	}
	get := func(url string, check func(int, []byte)) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: HTTP %d: %.300s", url, resp.StatusCode, body)
		}
		check(resp.StatusCode, body)
	}
	list := func(base string) func() {
		return func() {
			get(base+"/v1/submissions?limit=50", func(_ int, body []byte) {
				if n := bytes.Count(body, []byte(`"task_id"`)); n != 50 {
					b.Fatalf("%d records, not 50", n)
				}
			})
		}
	}
	var liveUntil func(int, string)
	// live reads the live stream until it has sent want records (every
	// record without recent).
	live := func(recent int) func() {
		return func() {
			want, q := held, ""
			if recent > 0 {
				want, q = recent, "&recent="+strconv.Itoa(recent)
			}
			liveUntil(want, q)
		}
	}
	liveUntil = func(want int, q string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, indexed+"/v1/live?only=records"+q, nil)
		req.Header.Set("Authorization", "Bearer "+op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		seen := 0
		for seen < want && sc.Scan() {
			if sc.Text() == "event: record" {
				seen++
			}
		}
		if seen < want {
			b.Fatalf("the live stream sent %d records of %d: %v", seen, want, sc.Err())
		}
	}
	for _, n := range sizes {
		fill(n)
		if err := idx.Sync(ctx, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		mid := fmt.Sprintf("%016x", n/2)
		for _, c := range []struct {
			name string
			op   func()
		}{
			{"list/index", list(indexed)},
			{"list/scan", list(scan)},
			{"page/submission", func() {
				get(indexed+"/submissions/"+mid, func(_ int, body []byte) {
					if !bytes.Contains(body, []byte(mid)) {
						b.Fatalf("the page of %s does not name it", mid)
					}
				})
			}},
			{"page/leaderboard", func() {
				get(indexed+"/leaderboard", func(_ int, body []byte) {
					if k := bytes.Count(body, []byte("<tr data-submission=")); k != min(n, pages.MaxLeaderboardRows) {
						b.Fatalf("the leaderboard draws %d rows, not %d", k, min(n, pages.MaxLeaderboardRows))
					}
				})
			}},
			{"live/first", live(0)},
			{"live/recent", live(200)},
		} {
			b.Run(fmt.Sprintf("%s/records=%d", c.name, n), func(b *testing.B) {
				c.op()
				for b.Loop() {
					c.op()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
			})
		}
	}
}
