package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ClickHouse is Debian's clickhouse-server (18.16 on the CI image), run
// in the foreground on loopback with its data in the cluster's folder,
// on the same ports across a stop and a start.
type ClickHouse struct {
	*Proc
	// Addr is the native protocol's host:port; HTTP the HTTP port's, for
	// its /ping.
	Addr, HTTP string
	// URL is the store URL the services get (LOWBARENA_STORE), as the
	// arena's own user (deploy/clickhouse/users.xml).
	URL string
}

// ErrNoClickHouse says no clickhouse-server binary is installed.
var ErrNoClickHouse = errors.New("cluster: no clickhouse-server binary (make deps installs Debian's)")

// clickHouseBinary finds the server: LOWBARENA_CLICKHOUSE_SERVER, PATH,
// then Debian's /usr/sbin/clickhouse-server.
func clickHouseBinary() (string, error) {
	if p := os.Getenv("LOWBARENA_CLICKHOUSE_SERVER"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	const deb = "/usr/sbin/clickhouse-server"
	if _, err := os.Stat(deb); err == nil {
		return deb, nil
	}
	return "", ErrNoClickHouse
}

// startClickHouse writes the server's configuration in dir/clickhouse
// and starts it.
func startClickHouse(dir string) (*ClickHouse, error) {
	bin, err := clickHouseBinary()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "clickhouse")
	for _, d := range []string{"data", "tmp", "user_files", "log", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	config := strings.NewReplacer("$DIR", home, "$TCP", itoa(ports[0]), "$HTTP", itoa(ports[1])).Replace(clickHouseConfig)
	if err := os.WriteFile(filepath.Join(home, "config.xml"), []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := os.WriteFile(filepath.Join(home, "users.xml"), []byte(clickHouseUsers), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	ch := &ClickHouse{
		Proc: &Proc{Name: "clickhouse", Bin: bin, Args: []string{"--config-file=" + filepath.Join(home, "config.xml")}, Dir: home,
			Log: filepath.Join(dir, "logs", "clickhouse.log")},
		Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		HTTP: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	ch.URL = "clickhouse://lowbarena:lowbarena@" + ch.Addr + "/lowbarena"
	if err := ch.Start(); err != nil {
		return nil, err
	}
	return ch, ch.WaitReady(context.Background(), time.Minute)
}

// WaitReady polls /ping until the server answers or wait has passed.
func (c *ClickHouse) WaitReady(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get("http://" + c.HTTP + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: clickhouse-server not ready within %s:\n%s", wait, c.LogTail(3000))
		case <-time.After(100 * time.Millisecond): // polling interval, not an assertion
		}
	}
}

// clickHouseConfig is the server's configuration; $DIR, $TCP and $HTTP are
// replaced. It takes what 18.16 takes (the <yandex> root).
const clickHouseConfig = `<?xml version="1.0"?>
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

// clickHouseUsers holds the arena's user, lowbarena, as
// deploy/clickhouse/users.xml has it, from loopback only.
const clickHouseUsers = `<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
    <users>
      <default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
      <lowbarena><password>lowbarena</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></lowbarena>
    </users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`
