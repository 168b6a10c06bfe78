//go:build !embedded

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// This is the light arena: every verb but up and demo asks a running
// arena over NATS, so this binary links neither the embedded ClickHouse
// engine (chDB, whose library is 566 MB) nor the services. up and demo
// run arena-up, the same command built with -tags embedded, which holds
// them: found beside this binary, else on PATH. Built this way, a
// participant's `arena` starts without libchdb.so; see docs/participants/cli.md, "Which
// verb needs what".

// upBinary is the name of the binary that holds `arena up`.
const upBinary = "arena-up"

func cmdUp(_ context.Context, args []string, _, stderr io.Writer) error {
	return execUp("up", args, stderr)
}

func cmdDemo(_ context.Context, args []string, _, stderr io.Writer) error {
	return execUp("demo", args, stderr)
}

// findUp returns the path of arena-up: beside this executable first (make
// build puts both in bin/), then on PATH.
func findUp() (string, error) {
	var looked []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), upBinary)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p, nil
			}
			looked = append(looked, p)
		}
	}
	if p, err := exec.LookPath(upBinary); err == nil {
		return p, nil
	}
	looked = append(looked, upBinary+" on PATH")
	return "", fmt.Errorf("looked for %v", looked)
}

// execUp replaces this process with arena-up VERB ARGS, so that signals,
// the terminal and the exit status are arena-up's own.
func execUp(verb string, args []string, stderr io.Writer) error {
	p, err := findUp()
	if err != nil {
		return &exitError{code: exitNoUp, err: fmt.Errorf("arena %s runs the arena itself, with its embedded ClickHouse engine, which this light arena leaves out (%v): "+
			"build it with `make build` (bin/arena-up) or `go build -tags embedded -o arena-up ./tools/arena`, and put it beside arena or on PATH", verb, err)}
	}
	argv := append([]string{upBinary, verb}, args...)
	if err := syscall.Exec(p, argv, os.Environ()); err != nil {
		return fmt.Errorf("run %s: %w", p, err)
	}
	return nil // not reached: Exec replaced the process
}
