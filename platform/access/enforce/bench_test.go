package enforce_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// BenchmarkPublishUnderPermissions measures a serial Publish of one event
// (schema validation, encoding, a JetStream publish acknowledged by the
// server) by the build service: on an open server, and on a server that
// holds every user to the permission table (nkey users, allow lists of
// 10 to 40 subjects, the server's per-client permission cache). The
// sub-benchmarks run in one process, one after the other, so their ratio
// is what the permissions cost a publish.
func BenchmarkPublishUnderPermissions(b *testing.B) {
	open := func(b *testing.B) *bus.Bus {
		bs, _ := bustest.Bus(b)
		return bs
	}
	enforced := func(b *testing.B) *bus.Bus {
		a := embedded(b)
		bs, err := bus.New(a.connect(b, access.Build))
		require.NoError(b, err)
		return bs
	}
	for _, c := range []struct {
		name string
		bus  func(*testing.B) *bus.Bus
	}{{"open", open}, {"permissions", enforced}} {
		b.Run(c.name, func(b *testing.B) {
			bs := c.bus(b)
			data := bustest.Sample(events.BuildStarted)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				i++
				if _, err := bs.PublishNew(ctx, "bench-"+strconv.Itoa(i), events.BuildStarted, events.Source("build"), bustest.SampleSubject, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
