package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/platform/stage/stagetest"
)

// The kit's contract on a stage shaped like build: one input topic, its
// own three events.
func TestStageContract(t *testing.T) {
	s := stage.Stage[events.SubmissionReceivedData, events.BuildCompletedData]{
		Input:    events.Submission.Received,
		Output:   events.Build,
		Consumer: bus.ConsumerConfig{AckWait: 30 * time.Second},
		Run: func(context.Context, events.SubmissionReceivedData) (events.BuildCompletedData, error) {
			panic("the contract replaces Run")
		},
	}
	in := bustest.Sample(events.SubmissionReceived).(*events.SubmissionReceivedData)
	out := bustest.Sample(events.BuildCompleted).(*events.BuildCompletedData)
	out.Bytes = 7
	stagetest.Contract(t, s, *in, *out)
}

// The kit's contract on a job stage shaped like efficiency.
func TestJobStageContract(t *testing.T) {
	s := stage.JobStage[events.ContractCompletedData, events.EfficiencyCompletedData]{
		Input:  events.Contract.Completed,
		Output: events.Efficiency,
		Kind:   events.JobEfficiency,
	}
	in := bustest.Sample(events.ContractCompleted).(*events.ContractCompletedData)
	out := bustest.Sample(events.EfficiencyCompleted).(*events.EfficiencyCompletedData)
	out.GPUHours = 0.01
	stagetest.JobContract(t, s, *in, *out)
}
