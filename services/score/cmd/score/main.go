// Command score is the arena's score stage: it joins each submission's
// submission.received and its contract, quality and efficiency outcomes,
// scores it under the scoring policy, writes the scores table and
// publishes score.completed; it answers `arena rescore`, `arena
// leaderboard` and `arena history`, and the round service's standing of
// a submission.
//
//	score --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --policy lowb-score/v1
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/score"
)

func main() { score.Component().Main(os.Args[1:]) }
