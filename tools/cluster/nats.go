package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/platform/store/clickhouse/chtest"
)

// Node is one nats-server of the cluster.
type Node struct {
	*Proc
	// ServerName is the node's server_name (nats-1, nats-2, nats-3, as in
	// docker-compose.yml).
	ServerName string
	// ClientURL is where clients connect; Monitor the HTTP monitoring
	// address (/healthz, /jsz).
	ClientURL, Monitor string
	// StoreDir is the node's JetStream folder, kept across restarts.
	StoreDir string
}

// nodePorts are a node's loopback ports.
type nodePorts struct{ client, cluster, monitor int }

// NodeConfig turns deploy/nats/cluster.conf (deployConf, its text) into
// the configuration of node i of a cluster on loopback: the same file,
// with its listeners on 127.0.0.1 and the ports given, its routes to the
// other nodes' cluster ports, its JetStream folder storeDir. It refuses a
// cluster.conf that no longer has the lines it rewrites, so a change to
// the deployment's file is seen here first.
func NodeConfig(deployConf string, ports []nodePorts, i int, storeDir string) (string, error) {
	p := ports[i]
	repl := []struct{ old, new string }{
		{"listen: 0.0.0.0:4222", fmt.Sprintf("listen: 127.0.0.1:%d", p.client)},
		{"http: 0.0.0.0:8222", fmt.Sprintf("http: 127.0.0.1:%d", p.monitor)},
		{"store_dir: /data/jetstream", fmt.Sprintf("store_dir: %q", storeDir)},
		{"max_file_store: 20GB", "max_file_store: 2GB"},
		{"listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", p.cluster)},
	}
	for n := range ports {
		repl = append(repl, struct{ old, new string }{fmt.Sprintf("nats-route://nats-%d:6222", n+1), fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n].cluster)})
	}
	out := deployConf
	for _, r := range repl {
		if c := strings.Count(out, r.old); c != 1 {
			return "", fmt.Errorf("cluster: deploy/nats/cluster.conf has %q %d times, want once: the harness rewrites it for loopback", r.old, c)
		}
		out = strings.Replace(out, r.old, r.new, 1)
	}
	return out, nil
}

// startNodes writes each node's configuration beside a copy of
// auth.conf and starts the three nats-servers, with every user's public
// key in their environment (nats.env), and waits until each is healthy.
func startNodes(dir, bin, deployDir string, pubEnv []string) ([]*Node, error) {
	conf, err := os.ReadFile(filepath.Join(deployDir, "cluster.conf"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	auth, err := os.ReadFile(filepath.Join(deployDir, "auth.conf"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	free, err := chtest.FreePorts(9)
	if err != nil {
		return nil, err
	}
	ports := make([]nodePorts, 3)
	for i := range ports {
		ports[i] = nodePorts{client: free[3*i], cluster: free[3*i+1], monitor: free[3*i+2]}
	}
	nodes := make([]*Node, len(ports))
	for i := range ports {
		name := fmt.Sprintf("nats-%d", i+1)
		ndir := filepath.Join(dir, name)
		store := filepath.Join(ndir, "jetstream")
		if err := os.MkdirAll(store, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		text, err := NodeConfig(string(conf), ports, i, store)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(ndir, "auth.conf"), auth, 0o644); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		cfg := filepath.Join(ndir, "cluster.conf")
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		nodes[i] = &Node{
			Proc: &Proc{Name: name, Bin: bin, Args: []string{"-c", cfg}, Dir: ndir,
				Env: append([]string{"NATS_NAME=" + name}, pubEnv...), Log: filepath.Join(dir, "logs", name+".log")},
			ServerName: name,
			ClientURL:  fmt.Sprintf("nats://127.0.0.1:%d", ports[i].client),
			Monitor:    fmt.Sprintf("127.0.0.1:%d", ports[i].monitor),
			StoreDir:   store,
		}
	}
	for _, n := range nodes {
		if err := n.Start(); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes {
		if err := n.WaitHealthy(context.Background(), time.Minute); err != nil {
			return nodes, err
		}
	}
	return nodes, nil
}

// WaitHealthy polls the node's /healthz (JetStream included) until it
// answers ok or wait has passed.
func (n *Node) WaitHealthy(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		var h struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		err := getJSON(ctx, "http://"+n.Monitor+"/healthz", &h)
		if err == nil && h.Status == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			//nolint:errorlint // err is nil when the monitor answered but not ok: shown beside its answer, not wrapped
			return fmt.Errorf("cluster: %s not healthy within %s (%v %s):\n%s", n.Name, wait, err, h.Error, n.LogTail(2000))
		case <-time.After(200 * time.Millisecond): // polling interval, not an assertion
		}
	}
}

// JSZ is the part of a node's /jsz the harness reads.
type JSZ struct {
	ServerName string `json:"server_name"`
	Meta       struct {
		Leader  string `json:"leader"`
		Cluster string `json:"name"`
		Size    int    `json:"cluster_size"`
		Pending int    `json:"pending"`
	} `json:"meta_cluster"`
	Streams  int `json:"streams"`
	Messages int `json:"messages"`
}

// JSZ reads the node's JetStream report.
func (n *Node) JSZ(ctx context.Context) (JSZ, error) {
	var j JSZ
	err := getJSON(ctx, "http://"+n.Monitor+"/jsz", &j)
	return j, err
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// /healthz answers 503 with a JSON body while it is not ready.
	return json.NewDecoder(resp.Body).Decode(v)
}

// readEnvFile reads KEY=VALUE lines (comments and blank lines skipped),
// the files `arena credentials` writes.
func readEnvFile(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.Contains(line, "=") {
			return nil, fmt.Errorf("cluster: %s: %q is not KEY=VALUE", path, line)
		}
		out = append(out, line)
	}
	return out, nil
}

// Snapshot copies the node's JetStream folder to dst, as it is on disk
// now: taken while the node is down, it is what a node restored from an
// old backup, or a disk that lost its latest writes, comes back with.
func (n *Node) Snapshot(dst string) error {
	return copyDir(n.StoreDir, dst)
}

// Restore replaces the node's JetStream folder with the snapshot in src.
// The node must be down.
func (n *Node) Restore(src string) error {
	if n.Running() {
		return fmt.Errorf("cluster: restore %s while it runs", n.Name)
	}
	if err := os.RemoveAll(n.StoreDir); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return copyDir(src, n.StoreDir)
}

// copyDir copies the regular files and folders under src to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
