package engine

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// HelperArg is the first argument that makes the runner's executable the
// engine sandbox's helper (see RunHelper).
const HelperArg = "lowbarena-engine-helper"

// probeOK is what the helper's probe writes when the sandbox works.
const probeOK = "lowbarena-engine-sandbox-ok"

// RunHelper makes this process the engine sandbox's helper, and exits,
// when its first argument is HelperArg; otherwise it returns at once.
// Every binary that runs sandboxed engines (the runner, arena, the tests
// of packages that start a Box) calls it first thing in main or TestMain:
// the Box binds that executable into the sandbox as its first process.
//
// Inside the sandbox the helper bounds its address space (-memory) and
// then either executes the command (a build), or starts it as its child
// and serves it through a Unix socket (-socket, -port): each connection to
// the socket is forwarded to the engine's port on the sandbox's loopback.
// It passes SIGTERM, SIGINT and SIGHUP to the engine and exits with the
// engine's status, so the runner sees the engine's exit as bubblewrap's.
func RunHelper() {
	if len(os.Args) < 2 || os.Args[1] != HelperArg {
		return
	}
	os.Exit(helper(os.Args[2:]))
}

// helper is RunHelper's body: its exit status.
func helper(args []string) int {
	fs := flag.NewFlagSet(HelperArg, flag.ContinueOnError)
	memory := fs.Int64("memory", 0, "address space limit in bytes")
	socket := fs.String("socket", "", "Unix socket to serve the engine through")
	port := fs.Int("port", 0, "the engine's port on the sandbox's loopback")
	probe := fs.Bool("probe", false, "report that the sandbox works")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *probe {
		fmt.Println(probeOK)
		return 0
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "lowbarena engine helper: no command")
		return 2
	}
	if *memory > 0 {
		lim := &syscall.Rlimit{Cur: uint64(*memory), Max: uint64(*memory)}
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, lim); err != nil {
			fmt.Fprintf(os.Stderr, "lowbarena engine helper: memory limit: %v\n", err)
			return 2
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "lowbarena engine helper: %v\n", err)
		return 127
	}
	if *socket == "" {
		err := syscall.Exec(path, argv, os.Environ())
		fmt.Fprintf(os.Stderr, "lowbarena engine helper: exec %s: %v\n", path, err)
		return 126
	}
	return serve(path, argv, *socket, *port)
}

// serve runs the engine as the helper's child and forwards the socket's
// connections to its port until it exits.
func serve(path string, argv []string, socket string, port int) int {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lowbarena engine helper: listen on %s: %v\n", socket, err)
		return 2
	}
	defer ln.Close()
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "lowbarena engine helper: start %s: %v\n", path, err)
		return 126
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(c, target)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "lowbarena engine helper: %v\n", err)
		return 1
	}
}

// forward copies c to a fresh connection to target and back, closing
// each direction's write side when its reader ends.
func forward(c net.Conn, target string) {
	defer c.Close()
	t, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return // the engine is not listening yet: the runner's probe retries
	}
	defer t.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(t, c)
		if tc, ok := t.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, t)
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	<-done
}
