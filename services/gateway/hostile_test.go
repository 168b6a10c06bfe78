package gateway_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/gateway"
)

// bomb is a gzip'd tar whose first file inflates to 96 MiB of zeros (the
// archive is about 100 KiB), then a valid declaration.
func bomb(t *testing.T, who string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "a.safetensors", Typeflag: tar.TypeReg, Mode: 0o644, Size: 96 << 20}))
	zeros := make([]byte, 1<<20)
	for range 96 {
		_, err := tw.Write(zeros)
		require.NoError(t, err)
	}
	decl := `{"task_id":"qwen3-tiny","split":"dev","participant":"` + who + `","solution":{"checkpoint":"c","method":"m"}}`
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "submission.json", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(decl))}))
	_, err := tw.Write([]byte(decl))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// noise is n random bytes: they do not compress.
func noise(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// uploadHead is the start of an upload written by hand.
func uploadHead(token string, length int, extra string) string {
	return fmt.Sprintf("POST /v1/submissions HTTP/1.1\r\nHost: arena\r\nAuthorization: Bearer %s\r\nContent-Type: application/gzip\r\nContent-Length: %d\r\n%s\r\n", token, length, extra)
}

// TestHostileInput: every way a participant, or anyone who reaches the
// gateway, can misbehave, each against the running gateway over loopback
// on an embedded NATS: refused with its stable code and a sentence,
// counted in lowbarena.gateway.refusals{code}, and never with a stack,
// an error of Go's or a path of the gateway's in the body.
func TestHostileInput(t *testing.T) {
	g := startGateway(t, map[string]string{
		"header-timeout": "500ms", "upload-idle-timeout": "500ms", "upload-min-rate": "100000",
		"uploads-per-participant": "1", "max-upload-bytes": strconv.Itoa(256 << 10),
	}, func(o *gateway.Options) { o.UploadGrace = 300 * time.Millisecond })
	ctx := context.Background()
	alice := g.add(t, "alice", participant.KindParticipant, participant.Limits{})
	bob := g.add(t, "bob", participant.KindParticipant, participant.Limits{})
	small := g.add(t, "small", participant.KindParticipant, participant.Limits{BytesPerSubmission: 4 << 10})
	daily := g.add(t, "daily", participant.KindParticipant, participant.Limits{SubmissionsPerDay: 1})
	gpu := g.add(t, "gpu", participant.KindParticipant, participant.Limits{GPUHoursPerWeek: 0.5})
	ops := g.add(t, "ops", participant.KindOperator, participant.Limits{})
	revoked := g.add(t, "gone", participant.KindParticipant, participant.Limits{})
	_, err := ctl.Call[ctl.Revoked](ctx, g.b.Conn(), ctl.SubjectParticipantRevoke, ctl.RevokeTokens{Name: "gone"})
	require.NoError(t, err)
	stranger, _, err := participant.NewToken(participant.KindParticipant)
	require.NoError(t, err)

	accepted := g.post(t, alice, packed(t, "alice", "dev", nil))
	require.Equal(t, http.StatusAccepted, accepted.status, accepted.raw)
	aliceDev := accepted.body["submission_id"].(string)
	require.Eventually(t, func() bool { return g.get(t, "/v1/submissions/"+aliceDev, alice).status == http.StatusOK }, 30*time.Second, 20*time.Millisecond)

	tests := []struct {
		name   string
		do     func(t *testing.T) answer
		status int
		code   string
		metric string // the metric's code when it is not the answer's
		text   string
	}{
		{"no token", func(t *testing.T) answer { return g.post(t, "", packed(t, "alice", "dev", nil)) },
			401, "token_missing", "", "submitting takes a participant's token"},
		{"a malformed token", func(t *testing.T) answer {
			return g.post(t, "lbp_"+strings.Repeat("a", 20), packed(t, "alice", "dev", nil))
		},
			401, "token_malformed", "", "is 80 characters"},
		{"not a bearer token", func(t *testing.T) answer {
			return g.do(t, http.MethodPost, "/v1/submissions", "", []byte("x"), map[string]string{"Authorization": "Basic YWxpY2U6c2VjcmV0"})
		}, 401, "token_malformed", "", "Bearer <token>"},
		{"another arena's token", func(t *testing.T) answer { return g.post(t, stranger, packed(t, "alice", "dev", nil)) },
			401, "token_invalid", "", "not one of this arena's"},
		{"a revoked token", func(t *testing.T) answer { return g.post(t, revoked, packed(t, "gone", "dev", nil)) },
			401, "token_revoked", "", "was revoked"},
		{"an operator's token", func(t *testing.T) answer { return g.post(t, ops, packed(t, "alice", "dev", nil)) },
			403, "token_not_participant", "", "submits nothing over HTTP"},
		{"a bundle naming another participant", func(t *testing.T) answer { return g.post(t, bob, packed(t, "alice", "dev", nil)) },
			403, "participant_mismatch", "", `names the participant "alice", and this token is bob's`},
		{"another participant's dev record", func(t *testing.T) answer { return g.get(t, "/v1/submissions/"+aliceDev, bob) },
			404, "submission_not_found", "record_hidden", "that this token may read"},
		{"an upload over the participant's bytes quota", func(t *testing.T) answer {
			return g.post(t, small, packed(t, "small", "dev", map[string]string{"model.safetensors": string(noise(t, 16<<10))}))
		}, 413, "quota_bytes_per_submission", "", "small may upload at most 4.0 KiB per submission"},
		{"an upload over the arena's largest", func(t *testing.T) answer {
			return g.post(t, bob, make([]byte, 300<<10))
		}, 413, "bundle_upload_too_large", "", "at most 256.0 KiB"},
		{"not a bundle", func(t *testing.T) answer { return g.post(t, bob, []byte("PK\x03\x04 a zip")) },
			422, "bundle_corrupt", "", "not a gzip'd tar"},
		{"a gzip bomb", func(t *testing.T) answer { return g.post(t, bob, bomb(t, "bob")) },
			422, "bundle_compression_ratio", "", "unpacks to more than"},
		{"no declaration", func(t *testing.T) answer {
			return g.post(t, bob, packed(t, "bob", "dev", map[string]string{"submission.json": ""}))
		},
			422, "bundle_no_declaration", "", "has no submission.json"},
		{"a digest that does not match", func(t *testing.T) answer {
			return g.do(t, http.MethodPost, "/v1/submissions", bob, packed(t, "bob", "dev", nil), map[string]string{"Lowbarena-Sha256": strings.Repeat("0", 64)})
		}, 400, "upload_digest_mismatch", "", "changed on the way"},
		{"an empty body", func(t *testing.T) answer { return g.post(t, bob, nil) },
			400, "upload_incomplete", "", "the upload is empty"},
		{"a body cut short", func(t *testing.T) answer {
			c := g.raw(t, uploadHead(bob, 5000, "")+"only this much")
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			return readAnswer(t, c)
		}, 400, "upload_incomplete", "", "ended after 14 bytes"},
		{"a slow-loris body that stalls", func(t *testing.T) answer {
			return readAnswer(t, g.raw(t, uploadHead(bob, 5000, "")+"a few bytes, then nothing"))
		}, 408, "upload_too_slow", "", "stalled or came slower"},
		{"a slow-loris body that trickles", func(t *testing.T) answer {
			c := g.raw(t, uploadHead(bob, 5000, ""))
			go func() {
				for range 100 {
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
			return readAnswer(t, c)
		}, 408, "upload_too_slow", "", "stalled or came slower than 97.7 KiB/s"},
		{"the day's submissions used", func(t *testing.T) answer {
			first := g.post(t, daily, packed(t, "daily", "dev", nil))
			require.Equal(t, http.StatusAccepted, first.status, first.raw)
			return g.post(t, daily, packed(t, "daily", "dev", nil))
		}, 429, "quota_submissions_per_day", "", "daily has made 1 submissions in the last 24 hours, its quota of 1 a day; the next submission is allowed at "},
		{"the week's GPU-hours used", func(t *testing.T) answer {
			first := g.post(t, gpu, packed(t, "gpu", "dev", nil))
			require.Equal(t, http.StatusAccepted, first.status, first.raw)
			id := first.body["submission_id"].(string)
			require.Eventually(t, func() bool { return g.get(t, "/v1/submissions/"+id, gpu).status == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
			// The runner's outcome of its job: 0.5 GPU-hours.
			_, err := bus.Emit(ctx, g.b, events.Source("runner"), events.Job.Completed, "eff-"+id, events.RunnerJobCompletedData{
				JobID: "eff-" + id, Kind: events.JobEfficiency, SubmissionID: id, Runner: "pod-0/runner-0", GPUHours: 0.5, Result: []byte(`{}`)}, bus.WithID("out-"+id))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				u, _ := g.get(t, "/v1/me", gpu).body["usage"].(map[string]any)
				return u["gpu_hours_last_week"] == 0.5
			}, 30*time.Second, 20*time.Millisecond)
			return g.post(t, gpu, packed(t, "gpu", "dev", nil))
		}, 429, "quota_gpu_hours_per_week", "", "gpu's submissions have used 0.5 GPU-hours in the last 7 days, its quota of 0.5 a week; the next submission is allowed at "},
		{"a second upload at once", func(t *testing.T) answer {
			// The first holds the slot: the server asks for its body
			// (100 Continue) only once it is past the slot.
			c := g.raw(t, uploadHead(bob, 2000, "Expect: 100-continue\r\n"))
			require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
			line := make([]byte, len("HTTP/1.1 100 Continue"))
			_, err := io.ReadFull(c, line)
			require.NoError(t, err)
			require.Equal(t, "HTTP/1.1 100 Continue", string(line))
			return g.post(t, bob, packed(t, "bob", "dev", nil))
		}, 429, "uploads_concurrent", "", "bob has 1 uploads in flight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := g.refusals(t)
			a := tt.do(t)
			require.Equal(t, tt.status, a.status, a.raw)
			require.Equal(t, tt.code, a.code(), a.raw)
			require.Contains(t, a.message(), tt.text)
			for _, leak := range []string{"goroutine", ".go:", g.spool, os.TempDir() + "/", "runtime error", "nats:"} {
				require.NotContains(t, a.raw, leak)
			}
			metric := tt.metric
			if metric == "" {
				metric = tt.code
			}
			require.Equal(t, before[metric]+1, g.refusals(t)[metric], "counted once under %s", metric)
			if tt.status == http.StatusTooManyRequests && tt.code != "uploads_concurrent" {
				retry, err := strconv.Atoi(a.header.Get("Retry-After"))
				require.NoError(t, err)
				require.Positive(t, retry)
				at, err := time.Parse(time.RFC3339, a.body["error"].(map[string]any)["retry_at"].(string))
				require.NoError(t, err)
				require.Contains(t, a.message(), at.Format(time.RFC3339))
			}
		})
	}

	// The day's quota names the moment: a day after the first; at that
	// moment the next is taken.
	a := g.post(t, daily, packed(t, "daily", "dev", nil))
	require.Equal(t, http.StatusTooManyRequests, a.status)
	at, err := time.Parse(time.RFC3339, a.body["error"].(map[string]any)["retry_at"].(string))
	require.NoError(t, err)
	g.clock.add(at.Sub(g.clock.now()) + time.Second)
	a = g.post(t, daily, packed(t, "daily", "dev", nil))
	require.Equal(t, http.StatusAccepted, a.status, a.raw)

	// A slow-loris client that never ends its headers is hung up on (no
	// answer can be sent), and counted.
	before := g.refusals(t)["header_timeout"]
	c := g.raw(t, "GET /healthz HTTP/1.1\r\nHost: arena\r\nX-Slow: ")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF, "the gateway closed the connection")
	require.Eventually(t, func() bool { return g.refusals(t)["header_timeout"] == before+1 }, 10*time.Second, 10*time.Millisecond)
	// A connection that sends nothing at all is not a slow-loris; nor is
	// an idle kept-alive one.
	idle, err := net.Dial("tcp", g.addr)
	require.NoError(t, err)
	defer idle.Close()
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = idle.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, before+1, g.refusals(t)["header_timeout"])
}

// TestInternalErrorShowsNoPath: a fault of the gateway's own (its spool
// folder gone) is answered with the request id only; the path is in the
// log, not the body.
func TestInternalErrorShowsNoPath(t *testing.T) {
	g := startGateway(t, nil, nil)
	alice := g.add(t, "alice", participant.KindParticipant, participant.Limits{})
	require.NoError(t, os.RemoveAll(g.spool))
	a := g.post(t, alice, packed(t, "alice", "dev", nil))
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Equal(t, "internal_error", a.code())
	require.Contains(t, a.message(), "request id "+a.header.Get("X-Request-Id"))
	require.NotContains(t, a.raw, g.spool)
	require.NotContains(t, a.raw, "no such file")
	require.Equal(t, int64(1), g.refusals(t)["internal_error"])
}
