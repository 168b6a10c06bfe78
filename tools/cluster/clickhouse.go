package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
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

// startClickHouse writes the server's configuration in dir/clickhouse
// and starts it.
func startClickHouse(dir string) (*ClickHouse, error) {
	// The same server, found and laid out as the store's tests do it
	// (chtest), with the arena's own user.
	bin, err := chtest.Binary()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w (make deps installs Debian's)", err)
	}
	home := filepath.Join(dir, "clickhouse")
	ports, err := chtest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	if err := chtest.WriteConfig(home, ports[0], ports[1], clickHouseUsers); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// The password reaches the server as the deployments give it: in its
	// environment, which users.xml reads (from_env), never in a file.
	var pw [12]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	password := hex.EncodeToString(pw[:])
	ch := &ClickHouse{
		Proc: &Proc{Name: "clickhouse", Bin: bin, Args: []string{"--config-file=" + filepath.Join(home, "config.xml")}, Dir: home,
			Log: filepath.Join(dir, "logs", "clickhouse.log"), Env: []string{"LOWBARENA_CLICKHOUSE_PASSWORD=" + password}},
		Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		HTTP: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	ch.URL = "clickhouse://lowbarena:" + password + "@" + ch.Addr + "/lowbarena"
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

// clickHouseUsers holds the arena's user, lowbarena, as
// deploy/clickhouse/users.xml has it (its password from the environment),
// from loopback only.
const clickHouseUsers = `<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
    <users>
      <default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
      <lowbarena><password from_env="LOWBARENA_CLICKHOUSE_PASSWORD"/><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></lowbarena>
    </users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`
