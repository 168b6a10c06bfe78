// Command quality is the arena's quality stage: for every kept contract it
// requests a GPU runner job that answers the campaign's eval suite (and
// one for the BF16 reference, once per campaign and suite version), pairs
// the graded items, and publishes the record's dev_quality block. It needs
// the store, where the runners write quality_items.
//
//	quality --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --campaigns /etc/lowbarena/campaigns
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/quality"
)

func main() { quality.Component().Main(os.Args[1:]) }
