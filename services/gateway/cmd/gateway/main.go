// Command gateway keeps the submission records: it folds every pipeline
// event into the record of its submission (JetStream KV bucket
// "submissions") and every round event into its own view of the round
// (bucket "round_views"), writes stage results to the store, and serves
// the records and round views over HTTP.
//
//	gateway --nats nats://nats:4222 --store clickhouse://clickhouse:9000/lowbarena --http :8080
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/gateway"
)

func main() { gateway.Component().Main(os.Args[1:]) }
