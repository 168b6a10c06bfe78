package schemas

import (
	"os"
	"testing"
)

// BenchmarkValidate validates a build.started payload and a fixture
// record (10 KiB) with the general validator alone and with the fast path
// (which accepts both), neither remembered: what one validation costs.
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
	for _, tc := range []struct {
		name string
		fast *fastNode
		run  func([]byte) error
		data []byte
	}{
		{"build.started/general", nil, func(d []byte) error { return validate(v.events[started], d) }, []byte(`{"submission_id":"b0c4e95f426f48e2","stage":"build","attempt":1}`)},
		{"build.started/fast", v.fastEvents[started], nil, []byte(`{"submission_id":"b0c4e95f426f48e2","stage":"build","attempt":1}`)},
		{"record/general", nil, func(d []byte) error { return validate(v.record, d) }, record},
		{"record/fast", v.fastRecord, nil, record},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if tc.fast != nil {
					if !fastValid(tc.fast, tc.data) {
						b.Fatal("the fast path refused")
					}
				} else if err := tc.run(tc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
