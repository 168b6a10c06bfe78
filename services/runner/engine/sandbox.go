package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrSandboxUnavailable is wrapped by the error of a Box that cannot
// sandbox a process on this machine: bubblewrap is missing, or it cannot
// create its namespaces (a container's seccomp profile, AppArmor, masked
// /proc). Nothing in it is the participant's fault: the runner refuses a
// job that needs the sandbox with reason engine_sandbox_unavailable and
// never falls back to an unsandboxed run.
var ErrSandboxUnavailable = errors.New("engine sandbox unavailable")

// Paths inside every sandbox.
const (
	// boxHelper is where the runner's own executable is bound,
	// read-only: the sandbox's first process (RunHelper).
	boxHelper = "/run/lowbarena/helper"
	// boxHost is the sandbox's host name (its own UTS namespace).
	boxHost = "lowbarena-engine"
	// BoxUID and BoxGID are the user and group a sandboxed process has
	// inside its user namespace (nobody and nogroup): no capabilities, and
	// outside it the runner's own user, seeing only what the box binds.
	BoxUID = 65534
	BoxGID = 65534
	// SocketName is the Unix socket's name in a run folder: the only way
	// into a sandboxed engine (see Box.Transport).
	SocketName = "engine.sock"
	// maxSocketPath is the longest path a Unix socket may have (sun_path
	// holds 108 bytes with its terminating zero).
	maxSocketPath = 107
)

// DefaultSystem are the host's folders every sandbox sees read-only at
// the same path: the programs and libraries of the image (/usr holds the
// Go toolchain, Python and the NVIDIA libraries the container runtime
// mounted) and the few files of /etc that programs read to start. A
// missing one is skipped; a symbolic link (/bin on a merged-usr system) is
// recreated as one.
var DefaultSystem = []string{
	"/usr", "/bin", "/lib", "/lib64", "/lib32", "/libx32", "/sbin",
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/localtime",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
}

// Box is the sandbox an untrusted engine, or its build, runs in: bubblewrap
// with a user, PID, IPC, UTS and network namespace of its own (the network
// namespace has only a loopback interface: no route to NATS, the store or
// the internet), a read-only root that holds only DefaultSystem (or
// System), ReadOnly and the runner's helper, the Writable folders, a
// private /tmp and /dev/shm, a minimal /dev plus Devices, and a fresh
// /proc of its own processes. Its processes run as BoxUID inside the user
// namespace, without capabilities, unable to create more namespaces, and
// die with the runner. Everything of the host that is not bound (the
// runner's data folder, its credentials, other runs, the Kubernetes
// service account) does not exist inside.
//
// Paths are bound at the same place inside as outside, so a command
// template's paths (the checkpoint, the built engine) need no rewriting.
type Box struct {
	// Bwrap is bubblewrap's path or name; default "bwrap".
	Bwrap string
	// Helper is the runner's executable, which must call RunHelper first
	// thing in main; default os.Executable().
	Helper string
	// System replaces DefaultSystem when set; Extra adds host paths to
	// it (an image's /opt/venv), read-only.
	System, Extra []string
	// ReadOnly are the run's own read-only paths: the engine, the
	// checkpoint, a build's source tree.
	ReadOnly []string
	// Writable are the folders the sandbox may write: an engine's run
	// folder (the first one is its working folder and HOME, and holds
	// the socket), a build's tree and output.
	Writable []string
	// Devices are device nodes bound into /dev (GPUDevices).
	Devices []string
	// Memory bounds each process's address space (RLIMIT_AS, set by the
	// helper before it executes the command), in bytes; 0 leaves it
	// unbounded (a CUDA engine reserves far more address space than it
	// uses, so engines run without it and the GPU's memory cap holds).
	Memory int64
}

// GPUDevices are the device nodes of the GPU whose minor number is minor
// (NVML's GetMinorNumber, /dev/nvidiaN), with the driver's shared nodes
// (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools), of those that
// exist on this machine; minor < 0 is no GPU and gives none.
func GPUDevices(minor int) []string {
	if minor < 0 {
		return nil
	}
	var out []string
	for _, p := range []string{"/dev/nvidia" + strconv.Itoa(minor), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Socket is the Unix socket a sandboxed engine is reached through: in the
// first Writable folder (its run folder).
func (b *Box) Socket() string {
	if len(b.Writable) == 0 {
		return ""
	}
	return filepath.Join(b.Writable[0], SocketName)
}

// TempDir is the sandbox's TMPDIR: its private /tmp, or, when a path b
// binds lies under /tmp (a test's folders, a runner with its --work
// there) and /tmp is therefore read-only inside, the "tmp" folder of its
// first Writable folder.
func (b *Box) TempDir() string {
	if b.tmpBound() && len(b.Writable) > 0 {
		return filepath.Join(b.Writable[0], "tmp")
	}
	return "/tmp"
}

// tmpBound reports whether a path b binds lies under /tmp.
func (b *Box) tmpBound() bool {
	for _, list := range [][]string{b.Extra, b.ReadOnly, b.Writable} {
		for _, p := range list {
			if abs, err := filepath.Abs(p); err == nil && strings.HasPrefix(abs, "/tmp/") {
				return true
			}
		}
	}
	return false
}

// Transport is an HTTP transport for the engine in b: every connection,
// whatever its URL's host and port, is a connection to b's Socket, which
// the helper inside the sandbox forwards to the engine's port on the
// sandbox's own loopback. URLs stay "http://127.0.0.1:PORT/...". A nil
// Box gives a plain transport.
func (b *Box) Transport() *http.Transport {
	t := &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: 90 * time.Second}
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialContext = d.DialContext
	if b == nil {
		return t
	}
	sock := b.Socket()
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", sock)
	}
	return t
}

// Forward asks the helper to serve the engine through the Unix socket
// Socket, forwarding each connection to 127.0.0.1:Port inside the
// sandbox.
type Forward struct {
	Socket string
	Port   int
}

// Command is argv run inside b, through the helper (RunHelper), with
// forward when it is not nil; dir is its working folder (default the
// first Writable folder). The caller sets the returned command's
// environment (it becomes the sandbox's: nothing else of the runner's
// passes), output and process attributes.
func (b *Box) Command(argv []string, dir string, forward *Forward) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("engine sandbox: no command")
	}
	var flags []string
	if b.Memory > 0 {
		flags = append(flags, "-memory", strconv.FormatInt(b.Memory, 10))
	}
	if forward != nil {
		if len(forward.Socket) > maxSocketPath {
			return nil, fmt.Errorf("engine sandbox: the socket path %s is longer than %d bytes: give the runner a shorter --work", forward.Socket, maxSocketPath)
		}
		flags = append(flags, "-socket", forward.Socket, "-port", strconv.Itoa(forward.Port))
	}
	return b.command(flags, argv, dir)
}

// command is the helper run inside b with flags, then argv after "--".
func (b *Box) command(flags, argv []string, dir string) (*exec.Cmd, error) {
	bwrap, err := exec.LookPath(b.bwrap())
	if err != nil {
		return nil, fmt.Errorf("%w: bubblewrap is not installed (%s: %w): install bubblewrap 0.8.0 or later (apt-get install bubblewrap)", ErrSandboxUnavailable, b.bwrap(), err)
	}
	helper := b.Helper
	if helper == "" {
		if helper, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: the runner's own executable: %w", ErrSandboxUnavailable, err)
		}
	}
	if dir == "" && len(b.Writable) > 0 {
		dir = b.Writable[0]
	}
	args, err := b.args(helper, dir)
	if err != nil {
		return nil, err
	}
	if tmp := b.TempDir(); tmp != "/tmp" {
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return nil, fmt.Errorf("engine sandbox: %w", err)
		}
	}
	args = append(args, "--", boxHelper, HelperArg)
	args = append(args, flags...)
	args = append(args, "--")
	args = append(args, argv...)
	cmd := exec.Command(bwrap, args...)
	cmd.Dir = "/"
	return cmd, nil
}

// args are bubblewrap's options for b, in its order (later mounts go on
// top of earlier ones).
func (b *Box) args(helper, dir string) ([]string, error) {
	a := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
		"--disable-userns", "--die-with-parent", "--hostname", boxHost,
		"--uid", strconv.Itoa(BoxUID), "--gid", strconv.Itoa(BoxGID),
	}
	system := b.System
	if system == nil {
		system = DefaultSystem
	}
	for _, p := range append(append([]string(nil), system...), b.Extra...) {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", target, p)
			}
		default:
			a = append(a, "--ro-bind", p, p)
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp")
	for _, d := range b.Devices {
		a = append(a, "--dev-bind", d, d)
	}
	if len(b.Devices) > 0 {
		// CUDA and NVML read the GPU's PCI topology there.
		a = append(a, "--ro-bind-try", "/sys", "/sys")
	}
	for _, p := range b.ReadOnly {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("engine sandbox: %w", err)
		}
		a = append(a, "--ro-bind", abs, abs)
	}
	for _, p := range b.Writable {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("engine sandbox: %w", err)
		}
		a = append(a, "--bind", abs, abs)
	}
	if b.tmpBound() {
		// Bubblewrap made the bound paths' parent folders on the private
		// /tmp: it is read-only then, lest the sandbox write beside them
		// (see TempDir).
		a = append(a, "--remount-ro", "/tmp")
	}
	a = append(a, "--ro-bind", helper, boxHelper, "--remount-ro", "/")
	if dir != "" {
		a = append(a, "--chdir", dir)
	}
	return a, nil
}

func (b *Box) bwrap() string {
	if b.Bwrap != "" {
		return b.Bwrap
	}
	return "bwrap"
}

// checked caches the bubblewrap paths whose probe succeeded; probing
// serialises the probes.
var (
	checked sync.Map // bwrap path + helper -> struct{}
	probing sync.Mutex
)

// Check reports whether b can sandbox a process here: nil, or an error
// wrapping ErrSandboxUnavailable that says what to install or enable. It
// runs the helper's probe inside a sandbox like b (without its binds) the
// first time and caches success.
func (b *Box) Check(ctx context.Context) error {
	key := b.bwrap() + "\x00" + b.Helper
	if _, ok := checked.Load(key); ok {
		return nil
	}
	probing.Lock()
	defer probing.Unlock()
	if _, ok := checked.Load(key); ok {
		return nil
	}
	probe := &Box{Bwrap: b.Bwrap, Helper: b.Helper, System: b.System, Extra: b.Extra}
	cmd, err := probe.command([]string{"-probe"}, nil, "/")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), probeOK) {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err()
		}
		return fmt.Errorf("%w: bubblewrap (%s) cannot create the engine sandbox as uid %d: %s; allow unprivileged user namespaces and a fresh /proc (Kubernetes: the runner container's securityContext.seccompProfile Unconfined, and procMount Unmasked where /proc is masked; Docker: --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined)",
			ErrSandboxUnavailable, b.bwrap(), os.Getuid(), orNone(strings.TrimSpace(lastLine(string(out)))+" "+errString(err)))
	}
	checked.Store(key, struct{}{})
	return nil
}

// lastLine is s's last non-empty line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}

func orNone(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "no message"
	}
	return s
}
