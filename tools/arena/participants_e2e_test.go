package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/schemas"
)

// arenaEnv runs the CLI with env added to the test's environment.
func arenaEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, arenaBin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
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

// apiGet reads path from the gateway with token ("" for none).
func apiGet(t *testing.T, base, path, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+base+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestParticipantsEndToEnd: the operator adds participants with the CLI,
// a participant submits over the gateway's HTTP API with its token (real
// processes: arena up, arena participant, arena submit --api), the
// pipeline runs its bundle, and what another participant, the public and
// a revoked token try is refused.
func TestParticipantsEndToEnd(t *testing.T) {
	data := t.TempDir()
	t.Setenv(app.EnvNATSCreds, filepath.Join(credentialsDir(data), access.Operator+".nk"))
	up := startUp(t, data)
	api := "http://" + up.http

	add := func(args ...string) string {
		t.Helper()
		r := arena(t, append(args, "--nats", up.natsURL)...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "shown this once")
		return lastWord(r.stdout)
	}
	team := add("participant", "add", "example-team")
	rival := add("participant", "add", "rival", "--submissions-per-day", "5")
	ops := add("operator", "add", "ops")
	require.True(t, strings.HasPrefix(team, "lbp_"), team)
	require.True(t, strings.HasPrefix(ops, "lbo_"), ops)
	r := arena(t, "participant", "add", "example-team", "--nats", up.natsURL)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "participant add refused: example-team is a participant already")

	// A participant submits its bundle over the API and waits for it;
	// the dishonest checkpoint ends at the contract, for its reason.
	as := func(token string) map[string]string { return map[string]string{"LOWBARENA_TOKEN": token} }
	r = arenaEnv(t, as(team), "submit", bundleDir("bf16-declared-w4"), "--api", api, "--wait", "--timeout", "3m")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stdout, "precision_wider_than_declared: W4A16KV8 declared · the service reads W16A16KV8")
	failedID := lastWord(r.stdout)

	// An honest one, without waiting: build and contract run on it like
	// on a bundle submitted over NATS, and the record is the token's
	// participant's.
	r = arenaEnv(t, as(team), "submit", bundleDir("fp8-w8a8"), "--api", api)
	require.Equal(t, 0, r.code, r.stderr)
	id := lastWord(r.stdout)
	require.True(t, events.ValidID(id), r.stdout)
	v, err := schemas.Default()
	require.NoError(t, err)
	var rec record.Submission
	require.Eventually(t, func() bool {
		status, body := apiGet(t, up.http, "/v1/submissions/"+id, team)
		if status != http.StatusOK {
			return false
		}
		require.NoError(t, v.ValidateRecord(body), "the record served over the API")
		require.NoError(t, json.Unmarshal(body, &rec))
		return stageOf(t, rec, "contract").Status == record.StatusDone
	}, 2*time.Minute, 300*time.Millisecond)
	require.Equal(t, "example-team", rec.Participant)
	require.Equal(t, record.StatusDone, stageOf(t, rec, "build").Status)
	require.Equal(t, "W8A8KV8", rec.Solution.DetectedPrecision)

	// Who reads it: its participant and the operators; to the public and
	// to another participant it does not exist.
	for who, tt := range map[string]struct {
		token  string
		status int
	}{"the public": {"", 404}, "another participant": {rival, 404}, "an operator": {ops, 200}, "its participant": {team, 200}} {
		status, body := apiGet(t, up.http, "/v1/submissions/"+failedID, tt.token)
		require.Equal(t, tt.status, status, "%s: %s", who, body)
		if status == http.StatusOK {
			require.NoError(t, v.ValidateRecord(body), who)
		} else {
			require.Contains(t, string(body), `"code":"submission_not_found"`, who)
		}
	}

	// What the rival tries: another participant's bundle, without a
	// token, with its token once revoked.
	r = arenaEnv(t, as(rival), "submit", bundleDir("int4-w4a16-g32"), "--api", api)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, `submission refused: participant_mismatch: submission.json names the participant "example-team", and this token is rival's`)
	r = arenaEnv(t, as(""), "submit", bundleDir("int4-w4a16-g32"), "--api", api)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "LOWBARENA_TOKEN")
	r = arena(t, "participant", "revoke", "rival", "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "revoked 1 token(s) of rival")
	r = arenaEnv(t, as(rival), "submit", bundleDir("int4-w4a16-g32"), "--api", api)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "submission refused: token_revoked")

	// The operator's list: quotas and use, token ids, never a token.
	r = arena(t, "participant", "list", "--nats", up.natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `example-team\s+participant\s+\S+ \S+\s+\S+\s+2 of 20\s+`, r.stdout)
	require.Regexp(t, `rival\s+participant\s+\S+ \S+\s+\S+ \(revoked\)\s+0 of 5`, r.stdout)
	for _, tok := range []string{team, rival, ops} {
		require.NotContains(t, r.stdout, tok)
		require.NotContains(t, up.stderr.String(), tok, "no token in arena up's log")
	}

	// The demo's operator: added on the first demo of a data folder, a
	// fresh token on the next; both read as an operator.
	for range 2 {
		c, err := dial(context.Background(), up.natsURL)
		require.NoError(t, err)
		tok, err := demoOperatorToken(context.Background(), c)
		c.close()
		require.NoError(t, err)
		status, body := apiGet(t, up.http, "/v1/me", tok)
		require.Equal(t, http.StatusOK, status, string(body))
		require.JSONEq(t, `{"kind":"operator","name":"demo-operator"}`, string(body))
	}

	// The page comes with its policy.
	resp, err := http.Get(api + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	up.stop(t)
}
