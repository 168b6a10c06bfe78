// Command efficiency is the arena's efficiency stage: for every kept
// contract it requests a GPU runner job that measures the checkpoint
// beside its campaign's BF16 reference on one pod and replays it under its
// budget, then publishes the record's efficiency block.
//
//	efficiency --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --campaigns /etc/lowbarena/campaigns
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/efficiency"
)

func main() { efficiency.Component().Main(os.Args[1:]) }
