// Command round runs the arena's rounds: on one pod, the in-round BF16
// baseline, the reigning leader and up to five candidates through the GPU
// runner, step by step, and the leader settled from their scores. A round
// survives the service: its state is in the rounds bucket and its pod
// held by a lease, so the next instance resumes it.
//
//	round --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --campaigns /etc/lowbarena/campaigns --pod h200-a
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/round"
)

func main() { round.Component().Main(os.Args[1:]) }
