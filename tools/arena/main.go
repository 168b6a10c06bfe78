// Command arena is the lowbarena command line: `arena up` runs the whole
// arena on one machine (embedded NATS JetStream, the embedded store and
// every service, in one process); submit, watch, show and sql are what a
// participant uses against a running arena.
//
// Built without tags it is the light CLI: every verb asks a running arena
// over NATS, and the binary links neither the embedded ClickHouse engine
// nor the services, so it starts without libchdb.so; up and demo run
// arena-up. Built with -tags embedded it is arena-up, which holds every
// verb and runs the arena in its own process (and needs libchdb.so).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lowbarena/lowbarena/services/runner/engine"
)

const usage = `arena: the lowbarena command line

usage (up and demo run arena-up, the arena with its embedded engine; every
other verb asks a running arena and needs nothing else):
  arena up     [--data DIR] [--nats-listen 127.0.0.1:4222] [--http 127.0.0.1:8080] [--store URL]
               run the arena on this machine (embedded NATS and chDB, every service)
  arena demo   [up flags] [--exit] [BUNDLE...]
               run the arena, submit the bundles (default: the examples, written
               to DIR/examples), print their results, keep serving
  arena example DIR
               write the example campaign (DIR/campaigns) and bundles (DIR/submissions):
               small real checkpoints, honest and dishonest
  arena submit DIR [--wait] [--timeout 30m] [--max-upload BYTES] [--nats URL | --api URL]
               submit the bundle in DIR; prints its id as the last word. A DIR
               holding checkpoint.json submits its checkpoint by reference. With
               --api (or LOWBARENA_API), over the gateway's HTTP API as the
               participant whose token is in LOWBARENA_TOKEN
  arena participant add NAME [--submissions-per-day N] [--bytes-per-submission B] [--gpu-hours-per-week H]
  arena participant token NAME | list | revoke NAME [--token ID]
               participants and their API tokens (a token is printed once, only
               its hash is kept); operators: arena operator add NAME (reads everything)
  arena reference [CHECKPOINT_DIR] --repository URL --revision COMMIT [--out FILE]
               write checkpoint.json for a checkpoint published in a model repository:
               from a local copy of it (every file's size and sha256), or without one
               from the hub's file list (shards' sha256 from LFS; only small files fetched)
  arena watch  [--json] [--all] [--id ID] [--round ID] [--nats URL]
               follow pipeline and round events live (--round: one round, step by step)
  arena round start --campaign C --candidates ID... [--pod P] [--wait]
               run a round: the in-round baseline, the leader and up to 5 candidates on one pod
  arena pods   [--json] [--nats URL]
               the pods: each runner's GPU and what it runs, the round holding a pod,
               and each pod's GPU-hours
  arena show   ID [--json] [--nats URL]
               print a submission's record
  arena leaderboard [--campaign C] [--policy V] [--json]
               scores best first (ClickHouse, through the score service)
  arena history [--model M] [--participant P] [--campaign C] [--rounds] [--json]
               scores over time, or (--rounds) the rounds and their results
  arena rescore --policy V [--since T] [--json]
               recompute scores from stored outcomes under policy V (no GPU work)
  arena sql    "SELECT ..." [--json|--csv|--tsv] [--max-rows 1000] [--timeout 10s] [--nats URL]
               one read-only statement (SELECT, SHOW, DESCRIBE, EXPLAIN) on the arena's store
  arena retention --older-than 30d [--dry-run] [--json] [--store URL]
               drop the gpu_samples and requests day partitions older than the age
               from the store (LOWBARENA_STORE); the history tables are kept
  arena campaign push DIR | list | history TASK [--json] [--nats URL]
               campaigns as versions in the arena's store: push a campaign folder (or a
               folder of them, as arena example writes) after checking every one; list
               what each task runs; a task's versions. Running services take a new
               version without a restart
  arena gc     [--delete] [--grace 6h] [--keep-failed 168h] [--json] [--nats URL]
               the artifacts nothing needs (submissions failed or disqualified
               long ago): what collecting them frees, and with --delete collect them;
               then each stream's bytes against its limit
  arena credentials DIR
               write the NATS users' nkeys for a cluster (deploy/nats, docker-compose.yml)

Commands that talk to a running arena read LOWBARENA_NATS_URL (default
nats://127.0.0.1:4222) unless --nats is given, and connect as its operator:
with LOWBARENA_NATS_CREDS (a seed or .creds file), else LOWBARENA_NATS_USER
and LOWBARENA_NATS_PASSWORD, else DIR/credentials/operator.nk of the data
folder (LOWBARENA_DATA, default .data/arena), which arena up writes.
`

// exitError carries a process exit status with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit statuses.
const (
	exitFailed = 1 // the command failed, or the submission did
	exitUsage  = 2
	// exitNoUp: the light arena cannot find arena-up for up or demo; the
	// status the embedded engine's loader exits with for a missing
	// library, since it is the same missing piece.
	exitNoUp = 3
)

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func main() {
	// arena up runs runners, whose sandboxed engines and engine builds
	// run this binary as their helper (see engine.RunHelper): that run
	// never reaches the CLI.
	engine.RunHelper()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code := exitFailed
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if err.Error() != "" {
			fmt.Fprintln(os.Stderr, "arena:", err)
		}
		os.Exit(code)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: exitUsage, err: errors.New("")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "up":
		return cmdUp(ctx, rest, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, rest, stdout, stderr)
	case "example":
		return cmdExample(ctx, rest, stdout, stderr)
	case "submit":
		return cmdSubmit(ctx, rest, stdout, stderr)
	case "reference":
		return cmdReference(ctx, rest, stdout, stderr)
	case "participant":
		return cmdParticipant(ctx, "participant", rest, stdout, stderr)
	case "operator":
		return cmdParticipant(ctx, "operator", rest, stdout, stderr)
	case "watch":
		return cmdWatch(ctx, rest, stdout, stderr)
	case "show":
		return cmdShow(ctx, rest, stdout, stderr)
	case "pods":
		return cmdPods(ctx, rest, stdout, stderr)
	case "leaderboard":
		return cmdLeaderboard(ctx, rest, stdout, stderr)
	case "history":
		return cmdHistory(ctx, rest, stdout, stderr)
	case "rescore":
		return cmdRescore(ctx, rest, stdout, stderr)
	case "sql":
		return cmdSQL(ctx, rest, stdout, stderr)
	case "round":
		return cmdRound(ctx, rest, stdout, stderr)
	case "retention":
		return cmdRetention(ctx, rest, stdout, stderr)
	case "campaign":
		return cmdCampaign(ctx, rest, stdout, stderr)
	case "credentials":
		return cmdCredentials(ctx, rest, stdout, stderr)
	case "gpu-check":
		return cmdGPUCheck(ctx, rest, stdout, stderr)
	case "gc":
		return cmdGC(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageErr("unknown command %q", cmd)
	}
}
