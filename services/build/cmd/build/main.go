// Command build is the arena's build stage: it consumes
// submission.received, checks and digests each uploaded bundle, stores it
// as a content-addressed artifact and publishes build.completed or
// build.failed.
//
//	build --nats nats://nats:4222 --work /var/lib/lowbarena/build
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/build"
)

func main() { build.Component().Main(os.Args[1:]) }
