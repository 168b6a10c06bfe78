package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// TestSubmitTheMomentHealthy: /healthz answers 200 only when a
// submission can be taken. A gateway that does not provision (a
// cluster's: the operator's provisioning runs beside it, and the
// services wait only for the ARENA stream) may start while the object
// stores, created last, are not there yet; a submission sent the moment
// /healthz first answers 200, over HTTP or as `arena submit` puts its
// bundle over NATS, is stored all the same. Repeated with the
// provisioning ending at different moments.
func TestSubmitTheMomentHealthy(t *testing.T) {
	g := startGateway(t, nil, nil)
	alice := g.add(t, "alice", participant.KindParticipant, participant.Limits{})
	js := g.b.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, delay := range []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(fmt.Sprintf("provisioned after %s", delay), func(t *testing.T) {
			// The operator's provisioning, caught before its object stores.
			require.NoError(t, js.DeleteObjectStore(ctx, bus.ObjectUploads))
			provisioned := make(chan error, 1)
			go func() {
				time.Sleep(delay)
				provisioned <- bus.Provision(ctx, js, bus.Topology{})
			}()
			polls, refused := 0, 0
			for {
				polls++
				resp, err := http.Get(g.url + "/healthz")
				require.NoError(t, err)
				a := decode(t, resp)
				if a.status == http.StatusOK {
					break
				}
				refused++
				require.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)
				require.Equal(t, "unavailable", a.code(), a.raw)
				require.Contains(t, a.message(), "object store uploads", a.raw)
				require.Less(t, polls, 100000, "never healthy")
			}
			t.Logf("healthy after %d polls (%d refused)", polls, refused)

			body := packed(t, "alice", "dev", nil)
			a := g.do(t, http.MethodPost, "/v1/submissions", alice, body, map[string]string{"Lowbarena-Sha256": sha(body)})
			require.Equal(t, http.StatusAccepted, a.status, a.raw)

			// `arena submit` over NATS puts its bundle with bus.PutObject.
			_, err := bus.PutObject(ctx, js, bus.ObjectUploads, jetstream.ObjectMeta{Name: fmt.Sprintf("cli-%d.tar.gz", i)}, bytes.NewReader(body), bus.PutRetry{})
			require.NoError(t, err)
			require.NoError(t, <-provisioned)
		})
	}
}
