package enginebuild_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// hostIPv4 is one of this machine's addresses other than loopback, or "".
func hostIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
			return ip.IP.String()
		}
	}
	return ""
}

// TestHostileEngineIsContained builds testdata/hostile.patch, an engine
// that at start and on every request tries to read a file of the
// runner's data folder, to connect to a listener on the host (standing
// for NATS and the internet) on loopback and on the host's address, to
// write outside its run folder and to read a secret of the runner's
// environment, and reports what got through in its log and its answers.
// Run sandboxed, it gets nothing, and the runner still measures it: it
// becomes healthy through the socket and answers a request there.
// Unsandboxed, the same engine gets through, which shows the probes
// work.
func TestHostileEngineIsContained(t *testing.T) {
	requireSandbox(t)
	built := buildHostile(t)

	data := t.TempDir() // the runner's data folder
	secret := filepath.Join(data, "nkey.seed")
	require.NoError(t, os.WriteFile(secret, []byte("SUAMYSECRET"), 0o600))
	plant := filepath.Join(data, "planted")
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	defer ln.Close()
	var reached atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dial := "127.0.0.1:" + port
	if ip := hostIPv4(); ip != "" {
		dial += "," + net.JoinHostPort(ip, port)
	}
	t.Setenv("LOWBARENA_TEST_SECRET", "from-the-runner")

	for _, sandboxed := range []bool{true, false} {
		t.Run(fmt.Sprintf("sandboxed=%v", sandboxed), func(t *testing.T) {
			reached.Store(0)
			_ = os.Remove(plant)
			run := filepath.Join(data, "runs", strconv.FormatBool(sandboxed))
			require.NoError(t, os.MkdirAll(run, 0o755))
			enginePort := freePort(t)
			argv := []string{built.Engine, "-port", strconv.Itoa(enginePort), "-steal", secret, "-dial", dial, "-plant", plant}
			o := engine.Options{Command: argv, Port: enginePort, HealthTimeout: 30 * time.Second, StopGrace: time.Second,
				Env: []string{"LOWBARENA_TEST_SECRET=from-the-runner"}, EnvAllow: []string{"LOWBARENA_*"}}
			var box *engine.Box
			if sandboxed {
				box = &engine.Box{ReadOnly: []string{built.Dir}, Writable: []string{run}}
				o.Sandbox = box
			} else {
				// The plain process writes its own-file in its working
				// folder: the run's, not the package's.
				t.Chdir(run)
			}
			e, err := engine.Start(t.Context(), o)
			require.NoError(t, err)
			defer e.Stop()

			hc := &http.Client{Timeout: 5 * time.Second, Transport: box.Transport()}
			resp, err := hc.Post("http://127.0.0.1:"+strconv.Itoa(enginePort)+"/v1/completions", "application/json", nil)
			require.NoError(t, err, "the runner reaches the engine through its socket")
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var answer struct {
				Escapes []string `json:"escapes"`
			}
			require.NoError(t, json.Unmarshal(body, &answer), string(body))
			_, plantErr := os.Stat(plant)
			if !sandboxed {
				// The probes work: run as a plain process, the engine
				// reads, connects and writes (the environment's secret
				// is denied either way).
				require.NotEmpty(t, answer.Escapes)
				require.Positive(t, reached.Load())
				require.NoError(t, plantErr)
				return
			}
			require.Empty(t, answer.Escapes, "the sandboxed engine got through while serving")
			require.Contains(t, e.StartupLog(), "escapes at start: \n", "the sandboxed engine got through at start")
			require.Zero(t, reached.Load(), "the sandboxed engine connected to the host")
			require.ErrorIs(t, plantErr, os.ErrNotExist, "the sandboxed engine wrote outside its run folder")
			own, err := os.ReadFile(filepath.Join(run, "own-file"))
			require.NoError(t, err, "the sandboxed engine writes its own run folder")
			require.Equal(t, "mine", string(own))
		})
	}
}

// freePort is a free loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
