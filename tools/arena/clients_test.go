package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/schemas"
	"github.com/lowbarena/lowbarena/services/runner"
)

// goGet builds what cmd builds with the Go module proxy (outside this
// workspace). When the proxy cannot be reached the test is skipped, unless
// CI is set: CI has the proxy, so there it is a failure.
func goGet(t *testing.T, dir string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	unreachable := regexp.MustCompile(`dial tcp|no such host|connection refused|i/o timeout|TLS handshake|GOPROXY=off|module lookup disabled|network is unreachable`)
	if os.Getenv("CI") == "" && unreachable.Match(out) {
		t.Skipf("the Go module proxy cannot be reached (%s); CI, which has it, runs this test", strings.TrimSpace(string(out)))
	}
	t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
}

// docBlock returns the code block that follows the marker comment
// "<!-- ... TestOutsideClients: NAME ... -->" of the participants' page
// on publishing without the CLI, docs/participants/without-cli.md.
func docBlock(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "participants", "without-cli.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)<!-- [^>]*TestOutsideClients: ` + regexp.QuoteMeta(name) + `[^>]*-->\n` + "```" + `[a-z]*\n(.*?)` + "```").FindSubmatch(raw)
	require.NotNil(t, m, "docs/participants/without-cli.md has the block %s", name)
	return string(m[1])
}

// TestOutsideClients runs, against a live arena, what
// docs/participants/without-cli.md shows: the nats CLI's
// upload, publish (without ce-subject, from a tar of ".") and follow, a
// round followed with it, and the CloudEvents Go SDK program in binary and
// structured mode; each submission's record is read back and checked
// against the record schema, and each event's dataschema is fetched from
// the gateway.
func TestOutsideClients(t *testing.T) {
	bin := t.TempDir()
	// go install, as the page says, into this test's own folder.
	t.Setenv("GOBIN", bin)
	goGet(t, ".", "install", "github.com/nats-io/natscli/nats@v0.5.0")
	sdkProgram := filepath.Join(bin, "cloudevents-go")
	goGet(t, filepath.Join("..", "..", "examples", "cloudevents-go"), "build", "-o", sdkProgram, ".")

	// The page's Go lines are the program's.
	prog, err := os.ReadFile(filepath.Join("..", "..", "examples", "cloudevents-go", "main.go"))
	require.NoError(t, err)
	for _, line := range strings.Split(docBlock(t, "the lines below are examples/cloudevents-go/main.go's"), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			require.Contains(t, string(prog), line, "docs/participants/without-cli.md quotes main.go")
		}
	}

	// No runner: the stages up to the contract are what clients need here.
	// Every client connects as the arena's operator (a seed arena up
	// writes): the CLI, the nats CLI and the SDK program.
	data := t.TempDir()
	operatorSeed := filepath.Join(credentialsDir(data), access.Operator+".nk")
	t.Setenv(app.EnvNATSCreds, operatorSeed)
	up := startUp(t, data, "--runners", "0")
	bundle := bundleDir("fp8-w8a8")
	shell := func(script string, env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), append([]string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
			"NATS_URL=" + up.natsURL, "NATS_NKEY=" + operatorSeed, "BUNDLE=" + bundle}, env...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s\n%s", script, out)
		return string(out)
	}
	contractDone := func(id string) record.Submission {
		t.Helper()
		var rec record.Submission
		require.Eventually(t, func() bool {
			res := arena(t, "show", id, "--json", "--nats", up.natsURL)
			return res.code == 0 && json.Unmarshal([]byte(res.stdout), &rec) == nil && stageOf(t, rec, "contract").Status == record.StatusDone
		}, time.Minute, 200*time.Millisecond, "the contract of %s ends", id)
		rec, _ = showJSON(t, up.natsURL, id) // and the record keeps its schema
		require.Equal(t, "W8A8KV8", rec.Solution.DetectedPrecision)
		require.Equal(t, "example-team", rec.Participant)
		return rec
	}

	// The nats CLI: upload, publish without ce-subject, follow.
	out := shell(docBlock(t, "nats-submit") + "\necho \"submitted=$ID\"\n")
	id := regexp.MustCompile(`submitted=([0-9a-f]{16})`).FindStringSubmatch(out)
	require.NotNil(t, id, out)
	rec := contractDone(id[1])
	require.Equal(t, "qwen3-tiny-fp8-w8a8", rec.Solution.Checkpoint)
	follow := shell(docBlock(t, "nats-follow"), "ID="+id[1])
	for _, want := range []string{"ce-type: dev.lowbarena.submission.received.v1", "ce-type: dev.lowbarena.build.completed.v1",
		"ce-type: dev.lowbarena.contract.completed.v1", "ce-dataschema: " + schemas.EventSchemaURI(string(events.ContractCompleted)),
		"ce-subject: " + id[1], `"id":"` + id[1] + `"`} {
		require.Contains(t, follow, want)
	}

	// A round, followed with the nats CLI (no runner serves its jobs: it
	// stays at its first steps, which is enough to follow). A round starts
	// only on a pod a live runner serves, so a runner's entry stands for
	// one in the pods registry, as a runner writes it.
	rnc := connectAs(t, up.natsURL, app.NATSAuth{CredsFile: filepath.Join(credentialsDir(data), access.Runner+".nk")}, access.Runner)
	rjs, err := jetstream.New(rnc)
	require.NoError(t, err)
	pods, err := rjs.KeyValue(context.Background(), bus.BucketPods)
	require.NoError(t, err)
	entry, err := json.Marshal(events.PodEntry{Pod: "pod-0", Runner: "r0", GPU: "H200 (simulated)", Simulated: true,
		Kinds: []string{string(events.JobSLA)}, StartedAt: time.Now(), SeenAt: time.Now()})
	require.NoError(t, err)
	_, err = pods.Put(context.Background(), runner.PodKey("pod-0", "r0"), entry)
	require.NoError(t, err)
	rnc.Close()
	rr := arena(t, "round", "start", "--campaign", examples.TaskID, "--candidates", id[1], "--nats", up.natsURL)
	require.Equal(t, 0, rr.code, rr.stderr)
	round := lastWord(rr.stdout)
	var steps string
	require.Eventually(t, func() bool {
		steps = shell(docBlock(t, "nats-round"), "ROUND="+round)
		return strings.Contains(steps, "ce-type: dev.lowbarena.round.step.v1")
	}, time.Minute, time.Second, "the round's steps")
	require.Contains(t, steps, "arena.round.started."+round)

	// The CloudEvents Go SDK, in both modes.
	nc := connectAs(t, up.natsURL, app.AuthFromEnv(), access.Operator)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, mode := range []string{"binary", "structured"} {
		t.Run("sdk "+mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, sdkProgram, "--nats", up.natsURL, "--nkey", operatorSeed, "--bundle", bundle, "--mode", mode)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "%s%s", stdout.String(), stderr.String())
			m := regexp.MustCompile(`submitted ([0-9a-f]{16}) in ` + mode + ` mode`).FindStringSubmatch(stdout.String())
			require.NotNil(t, m, stdout.String())
			sid := m[1]
			require.Contains(t, stdout.String(), "dev.lowbarena.contract.completed.v1 "+sid+" "+schemas.EventSchemaURI(string(events.ContractCompleted)))
			contractDone(sid)

			// The arena answered in the mode it was asked in.
			st, err := js.Stream(ctx, events.StreamArena)
			require.NoError(t, err)
			msg, err := st.GetLastMsgForSubject(ctx, "arena.contract.completed."+sid)
			require.NoError(t, err)
			want := ce.Binary
			if mode == "structured" {
				want = ce.Structured
			}
			require.Equal(t, want, ce.Detect(msg.Header, msg.Data))

			// The dataschema it printed is served by the gateway.
			resp, err := http.Get("http://" + up.http + "/schemas/events/" + string(events.ContractCompleted) + ".json")
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var sch struct {
				ID string `json:"$id"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&sch))
			require.Equal(t, schemas.EventSchemaURI(string(events.ContractCompleted)), sch.ID)
		})
	}
	up.stop(t)
}
