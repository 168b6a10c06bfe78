package colconv_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store/internal/colconv"
)

type (
	myString string
	myInt    int16
)

func TestConvert(t *testing.T) {
	ts := time.UnixMilli(1767225600123)
	tests := []struct {
		name string
		typ  string
		in   any
		want any
	}{
		{"string", "String", "a", "a"},
		{"bytes", "String", []byte("b"), []byte("b")},
		{"named string", "String", myString("c"), "c"},
		{"float64", "Float64", 0.5, 0.5},
		{"float32 into Float64", "Float64", float32(0.5), 0.5},
		{"float64 into Float32", "Float32", 0.25, float32(0.25)},
		{"int into Float64", "Float64", 3, 3.0},
		{"uint64 into Float64", "Float64", uint64(1 << 53), float64(1 << 53)},
		{"uint64 max", "UInt64", uint64(math.MaxUint64), uint64(math.MaxUint64)},
		{"int into UInt64", "UInt64", 7, uint64(7)},
		{"int into UInt8", "UInt8", 255, uint8(255)},
		{"uint64 into UInt32", "UInt32", uint64(math.MaxUint32), uint32(math.MaxUint32)},
		{"uint32 into UInt16", "UInt16", uint32(65535), uint16(65535)},
		{"named int into Int64", "Int64", myInt(-3), int64(-3)},
		{"int64 min", "Int64", int64(math.MinInt64), int64(math.MinInt64)},
		{"int8 min", "Int8", -128, int8(-128)},
		{"int8 max", "Int8", uint8(127), int8(127)},
		{"int32 min", "Int32", int64(math.MinInt32), int32(math.MinInt32)},
		{"bool true", "UInt8", true, uint8(1)},
		{"bool false", "UInt8", false, uint8(0)},
		{"time", "UInt64", ts, uint64(1767225600123)},
		{"other types pass through", "Array(String)", []string{"a"}, []string{"a"}},
		{"nil into Nullable", "Nullable(UInt64)", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := colconv.Convert(tt.typ, tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestConvertErrors(t *testing.T) {
	tests := []struct {
		name    string
		typ     string
		in      any
		wantMsg string
	}{
		{"nil into UInt64", "UInt64", nil, "not Nullable"},
		{"nil into String", "String", nil, "not Nullable"},
		{"int into String", "String", 42, "not a string"},
		{"string into UInt64", "UInt64", "1", "not an integer"},
		{"float into UInt64", "UInt64", 1.0, "not an integer"},
		{"string into Float64", "Float64", "0.5", "not a float"},
		{"negative into UInt64", "UInt64", -1, "negative"},
		{"UInt8 overflow", "UInt8", 256, "overflows"},
		{"UInt32 overflow", "UInt32", uint64(1) << 32, "overflows"},
		{"Int8 overflow", "Int8", 128, "overflows"},
		{"Int8 underflow", "Int8", -129, "overflows"},
		{"Int64 overflow", "Int64", uint64(math.MaxInt64) + 1, "overflows"},
		{"time before 1970", "UInt64", time.Unix(-1, 0), "before 1970"},
		{"struct", "UInt64", struct{}{}, "not an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := colconv.Convert(tt.typ, tt.in)
			require.ErrorContains(t, err, tt.wantMsg)
			require.Nil(t, got)
		})
	}
}
