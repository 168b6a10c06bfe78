package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/record"
)

// arenaBin is the arena binary the end-to-end tests run as real processes.
var arenaBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "arena-e2e-")
	if err != nil {
		panic(err)
	}
	arenaBin = filepath.Join(dir, "arena")
	out, err := exec.Command("go", "build", "-o", arenaBin, ".").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		panic("build arena: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what a finished CLI process printed.
type result struct {
	stdout, stderr string
	code           int
}

func arena(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, arenaBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// upProc is a running `arena up`.
type upProc struct {
	cmd           *exec.Cmd
	natsURL, http string
	stderr        *bytes.Buffer
	exited        chan struct{}
}

var upLine = regexp.MustCompile(`arena up: NATS (nats://\S+) · HTTP http://(\S+) ·`)

func startUp(t *testing.T, data string) *upProc {
	t.Helper()
	cmd := exec.Command(arenaBin, "up", "--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &upProc{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "arena up exited before it was up: %s", p.stderr)
			if m := upLine.FindStringSubmatch(line); m != nil {
				p.natsURL, p.http = m[1], m[2]
				go func() {
					for range lines {
					}
				}()
				return p
			}
		case <-deadline:
			t.Fatalf("arena up did not come up: %s", p.stderr)
		}
	}
}

// stop sends SIGTERM and requires a clean exit.
func (p *upProc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("arena up did not stop on SIGTERM: %s", p.stderr)
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "arena up exit: %s", p.stderr)
}

func lastWord(s string) string {
	f := strings.Fields(strings.TrimSpace(s))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

func showJSON(t *testing.T, natsURL, id string) (record.Submission, map[string]any) {
	t.Helper()
	r := arena(t, "show", id, "--json", "--nats", natsURL)
	require.Equal(t, 0, r.code, "show: %s", r.stderr)
	var rec record.Submission
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	return rec, raw
}

func TestCLIWithoutArena(t *testing.T) {
	for _, args := range [][]string{
		{"show", "abc123", "--nats", "nats://127.0.0.1:1"},
		{"watch", "--nats", "nats://127.0.0.1:1"},
		{"submit", "../../examples/submissions/fp8-w8a8", "--nats", "nats://127.0.0.1:1"},
	} {
		r := arena(t, args...)
		require.Equal(t, exitFailed, r.code, args)
		require.Contains(t, r.stderr, "the arena is not running: nothing answers at nats://127.0.0.1:1", args)
		require.Contains(t, r.stderr, "arena up", args)
	}
	r := arena(t, "show", "../etc", "--nats", "nats://127.0.0.1:1")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "is not a submission id")
	r = arena(t, "frobnicate")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)
}

func TestArenaEndToEnd(t *testing.T) {
	data := t.TempDir()
	up := startUp(t, data)

	// A second arena on the same folder is refused.
	r := arena(t, "up", "--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "data folder in use")

	// watch follows events live, as a separate process.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch := exec.CommandContext(wctx, arenaBin, "watch", "--json", "--all", "--nats", up.natsURL)
	wout, err := watch.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, watch.Start())
	watched := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(wout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				watched <- m
			}
		}
	}()

	r = arena(t, "submit", "../../examples/submissions/fp8-w8a8", "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	id := lastWord(r.stdout)
	require.True(t, events.ValidID(id), "submit printed %q", r.stdout)

	select {
	case m := <-watched:
		require.Equal(t, string(events.SubmissionReceived), m["type"])
		require.Equal(t, id, m["subject"])
		require.Equal(t, "qwen3-8b", m["data"].(map[string]any)["task_id"])
	case <-time.After(30 * time.Second):
		t.Fatal("arena watch printed no event")
	}

	var rec record.Submission
	var raw map[string]any
	require.Eventually(t, func() bool {
		res := arena(t, "show", id, "--json", "--nats", up.natsURL)
		return res.code == 0
	}, 30*time.Second, 200*time.Millisecond)
	rec, raw = showJSON(t, up.natsURL, id)
	require.Equal(t, id, rec.ID)
	require.Equal(t, record.StatusRunning, rec.Status)
	require.Equal(t, "example-team", rec.Participant)
	require.Equal(t, "W8A8KV8", rec.Solution.Precision)
	names := make([]string, len(rec.Stages))
	for i, s := range rec.Stages {
		names[i] = s.Name
		require.Contains(t, []string{"pending", "running", "done", "failed", "skipped"}, s.Status)
	}
	require.Equal(t, events.Stages, names)
	for _, k := range []string{"agent", "created_at", "error", "id", "participant", "partition", "result", "runner", "solution", "split", "stages", "status", "task_id", "track", "updated_at"} {
		require.Contains(t, raw, k, "the record keeps the fixtures' top-level fields")
	}

	// The same record over HTTP.
	resp, err := http.Get("http://" + up.http + "/v1/submissions/" + id)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var viaHTTP record.Submission
	require.NoError(t, json.Unmarshal(body, &viaHTTP))
	require.Equal(t, rec.ID, viaHTTP.ID)

	// --wait follows the record; with no stage service running it gives up
	// at its timeout and says where the submission stands.
	r = arena(t, "submit", "../../examples/submissions/fp8-w8a8", "--wait", "--timeout", "3s", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "gave up waiting after 3s; still running: build pending · contract pending")

	// Human output and unknown ids.
	r = arena(t, "show", id, "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "submission "+id+"  RUNNING")
	require.Contains(t, r.stdout, "build pending · contract pending")
	r = arena(t, "show", "0000000000000000", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "no such submission: the arena has no submission 0000000000000000")

	// A malformed event published straight to an arena subject is
	// dead-lettered with its reason, not lost and not looping.
	nc, err := nats.Connect(up.natsURL)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "arena.build.started.junk", []byte("not a cloudevent"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := js.Stream(context.Background(), events.StreamDLQ)
		if err != nil {
			return false
		}
		m, err := st.GetLastMsgForSubject(context.Background(), "dlq.>")
		return err == nil && m.Header.Get(bus.HeaderDLQReason) == "malformed_event"
	}, 30*time.Second, 100*time.Millisecond)
	nc.Close()

	// Restart on the same folder: nothing is lost.
	wcancel()
	_ = watch.Wait()
	up.stop(t)
	up2 := startUp(t, data)
	rec2, _ := showJSON(t, up2.natsURL, id)
	require.Equal(t, rec.ID, rec2.ID)
	require.Equal(t, rec.CreatedAt, rec2.CreatedAt)
	r = arena(t, "submit", "../../examples/submissions/int4-declared-w4a4", "--nats", up2.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	id2 := lastWord(r.stdout)
	require.NotEqual(t, id, id2)
	require.Eventually(t, func() bool {
		return arena(t, "show", id2, "--json", "--nats", up2.natsURL).code == 0
	}, 30*time.Second, 200*time.Millisecond)
	up2.stop(t)
}
