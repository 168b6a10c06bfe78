package ce_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/lowbarena/lowbarena/platform/ce"
)

// BenchmarkDecode decodes a contract.completed-sized event (about 2 KiB of
// data) in each content mode, as the consume loop does for every message.
func BenchmarkDecode(b *testing.B) {
	e := event.New(event.CloudEventsVersionV1)
	e.SetID("6113f6cbe08c108d8595fceea5dd7bf4")
	e.SetSource("/lowbarena/contract")
	e.SetType("dev.lowbarena.contract.completed.v1")
	e.SetSubject("b0c4e95f426f48e2")
	e.SetTime(time.Date(2026, 12, 4, 18, 45, 9, 0, time.UTC))
	e.SetDataSchema("https://lowbarena.dev/schemas/events/dev.lowbarena.contract.completed.v1.json")
	data := []byte(`{"submission_id":"b0c4e95f426f48e2","detected_precision":"W8A8KV8","contract":{"ok":true,"bits_per_weight":8.104,` +
		`"quantization":{"quant_method":"compressed-tensors","format":"float-quantized"},"pad":"` + strings.Repeat("x", 1800) + `"}}`)
	if err := e.SetData(event.ApplicationJSON, data); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []ce.Mode{ce.Binary, ce.Structured} {
		msg, err := ce.EncodeMode(e, mode)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode.String(), func(b *testing.B) {
			b.SetBytes(int64(len(msg.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ce.Decode(msg.Header, msg.Data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
