package api

import (
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

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/domain/participant"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

// BenchmarkListSubmissionsScale is the scale curve of GET
// /v1/submissions?limit=50 as an operator reads it: the records bucket
// holds 1,000 then 10,000 records (100,000 with LOWBARENA_BENCH_100K=1:
// 640 MB of records), each the fixture record of testdata (6.4 KB, as the
// projector writes them) with its own id, participant and time. It reports
// the time of one request and that time per record held: a flat
// ns/record is a linear curve.
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
	ctx := context.Background()
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
	a, err := New(Options{Records: records, Views: kv(bus.BucketRoundViews), Registry: reg, Ledger: usage.New(kv(bus.BucketUsage), nil),
		Bus: bs, NC: bs.Conn(), Defaults: testQuotas, Spool: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(a)
	b.Cleanup(srv.Close)

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
	get := func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/submissions?limit=50", nil)
		req.Header.Set("Authorization", "Bearer "+op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || bytes.Count(body, []byte(`"task_id"`)) != 50 {
			b.Fatalf("HTTP %d, %d records: %.200s", resp.StatusCode, bytes.Count(body, []byte(`"task_id"`)), body)
		}
	}
	for _, n := range sizes {
		fill(n)
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			get()
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
		})
	}
}
