package schemas

import (
	"os"
	"testing"
)

// BenchmarkValidate validates a build.started payload and a fixture
// record (10 KiB) with the library, neither remembered: what a first
// validation costs. build.started/remembered is the same payload through
// Validate once it has passed: what a repeat costs (see passedCache).
func BenchmarkValidate(b *testing.B) {
	v, err := NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	record, err := os.ReadFile("testdata/lowbarena/submission_qwen3-8b_b0c4e95f426f48e2.json")
	if err != nil {
		b.Fatal(err)
	}
	const started = "dev.lowbarena.build.started.v1"
	startedData := []byte(`{"submission_id":"b0c4e95f426f48e2","stage":"build","attempt":1}`)
	for _, tc := range []struct {
		name string
		run  func([]byte) error
		data []byte
	}{
		{"build.started/general", func(d []byte) error { return validate(v.events[started], d) }, startedData},
		{"build.started/remembered", func(d []byte) error { return v.Validate(started, d) }, startedData},
		{"record/general", func(d []byte) error { return validate(v.record, d) }, record},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.run(tc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
