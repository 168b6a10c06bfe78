// Package chtest starts a real ClickHouse server for tests: Debian's
// clickhouse-server (18.16 on the CI image), in the foreground, on free
// loopback ports, with its data in the test's temporary folder.
//
// Environment:
//
//	LOWBARENA_TEST_CLICKHOUSE_ADDR   host:port of a server to use instead
//	                                 (native protocol); nothing is started
//	LOWBARENA_CLICKHOUSE_SERVER      the server binary (default: clickhouse-server
//	                                 on PATH, then /usr/sbin/clickhouse-server)
//	LOWBARENA_REQUIRE_CLICKHOUSE=1   a missing binary fails the test instead of
//	                                 skipping it (make test sets it)
package chtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment variables read by Start.
const (
	EnvAddr    = "LOWBARENA_TEST_CLICKHOUSE_ADDR"
	EnvBinary  = "LOWBARENA_CLICKHOUSE_SERVER"
	EnvRequire = "LOWBARENA_REQUIRE_CLICKHOUSE"
)

// ReadyTimeout bounds how long Start waits for the server to answer.
const ReadyTimeout = 30 * time.Second

// ErrNoServer is wrapped by the error of Binary when no server binary is
// installed.
var ErrNoServer = errors.New("chtest: no clickhouse-server binary")

// Start returns the native protocol address (host:port) of a ClickHouse
// server for t. Unless EnvAddr names one, it starts a server that lives
// until t's cleanup, which kills it. When no server binary is installed the
// test is skipped, or fails when EnvRequire is "1".
func Start(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv(EnvAddr); addr != "" {
		return addr
	}
	bin, err := Binary()
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%v; %s=1 requires a real server: install it with `make deps` (apt-get install clickhouse-server) or point %s at one", err, EnvRequire, EnvAddr)
		}
		t.Skipf("%v; skipping (set %s=1 to fail instead, or %s to use a running server)", err, EnvRequire, EnvAddr)
	}
	addr, err := start(t, bin)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Binary returns the path of the clickhouse-server binary Start would run.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w", ErrNoServer, EnvBinary, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	const deb = "/usr/sbin/clickhouse-server"
	if _, err := os.Stat(deb); err == nil {
		return deb, nil
	}
	return "", fmt.Errorf("%w on PATH or at /usr/sbin/clickhouse-server", ErrNoServer)
}

// start runs the server in a fresh folder and waits until it answers.
func start(t testing.TB, bin string) (string, error) {
	dir := t.TempDir()
	ports, err := FreePorts(2)
	if err != nil {
		return "", err
	}
	tcp, httpPort := ports[0], ports[1]
	if err := WriteConfig(dir, tcp, httpPort, UsersXML); err != nil {
		return "", err
	}

	var out bytes.Buffer
	cmd := exec.Command(bin, "--config-file="+filepath.Join(dir, "config.xml"))
	cmd.Dir = dir
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("chtest: start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// The data is thrown away with the folder, so there is nothing to
		// flush: kill rather than wait seconds for a graceful stop.
		_ = cmd.Process.Kill()
		<-exited
	})

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp))
	ping := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)) + "/ping"
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(ReadyTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return "", fmt.Errorf("chtest: %s exited before it was ready (%w):\n%s%s", bin, err, out.String(), logTail(dir))
		default:
		}
		if resp, err := client.Get(ping); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("chtest: %s not ready after %s:\n%s", bin, ReadyTimeout, logTail(dir))
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not an assertion
	}
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chtest: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logTail returns the end of the server's error log, for failure messages.
func logTail(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "log", "server.err.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "server.err.log:\n" + string(b)
}

// WriteConfig lays out a server's folder in dir (its data, tmp, log and
// other folders) with a config.xml listening on loopback on the tcp and
// http ports, and users as its users.xml. The server runs with
// --config-file=dir/config.xml.
func WriteConfig(dir string, tcp, http int, users string) error {
	for _, d := range []string{"data", "tmp", "user_files", "log", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("chtest: %w", err)
		}
	}
	config := strings.NewReplacer("$DIR", dir, "$TCP", strconv.Itoa(tcp), "$HTTP", strconv.Itoa(http)).Replace(configXML)
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(config), 0o644); err != nil {
		return fmt.Errorf("chtest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o644); err != nil {
		return fmt.Errorf("chtest: %w", err)
	}
	return nil
}

// configXML is the server configuration; $DIR, $TCP and $HTTP are replaced.
// It takes what 18.16 takes (the <yandex> root).
const configXML = `<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$DIR/log/server.log</log><errorlog>$DIR/log/server.err.log</errorlog><size>10M</size><count>1</count></logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>$HTTP</http_port>
    <tcp_port>$TCP</tcp_port>
    <path>$DIR/data/</path>
    <tmp_path>$DIR/tmp/</tmp_path>
    <user_files_path>$DIR/user_files/</user_files_path>
    <format_schema_path>$DIR/format_schemas/</format_schema_path>
    <users_config>$DIR/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mark_cache_size>67108864</mark_cache_size>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
    <max_concurrent_queries>50</max_concurrent_queries>
    <mlock_executable>false</mlock_executable>
</yandex>
`

// UsersXML lets the passwordless default user in from loopback only.
const UsersXML = `<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`
