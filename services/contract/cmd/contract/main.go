// Command contract is the arena's contract stage: it consumes
// build.completed, reads config.json and the safetensors headers of each
// built bundle from the artifact store, checks them against the campaign's
// source model and the participant's declaration, and publishes
// contract.completed or contract.failed.
//
//	contract --nats nats://nats:4222 --campaigns /etc/lowbarena/campaigns
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/contract"
)

func main() { contract.Component().Main(os.Args[1:]) }
