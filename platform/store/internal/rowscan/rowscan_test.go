package rowscan_test

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store/internal/rowscan"
)

type row struct {
	S   string   `ch:"s"`
	U8  uint8    `ch:"u8"`
	U64 uint64   `ch:"u64"`
	I32 int32    `ch:"i32"`
	F   float64  `ch:"f"`
	B   bool     `ch:"b"`
	Arr []uint32 `ch:"arr"`
}

// field returns the addressable field of a fresh row named by its tag.
func field(t *testing.T, tag string) reflect.Value {
	t.Helper()
	d, err := rowscan.New(&[]row{})
	require.NoError(t, err)
	plan := d.Plan([]string{tag})
	require.GreaterOrEqual(t, plan[0], 0)
	return d.Next().Field(plan[0])
}

func TestSet(t *testing.T) {
	u := uint64(9)
	var nilPtr *uint64
	tests := []struct {
		tag     string
		in      any
		want    any
		wantErr string
	}{
		{"s", "x", "x", ""},
		{"s", []byte("y"), "y", ""},
		{"s", 42, nil, "cannot put"},
		{"u8", uint64(255), uint8(255), ""},
		{"u8", uint64(256), nil, "overflows"},
		{"u8", -1, nil, "does not fit"},
		{"u8", true, uint8(1), ""},
		{"u64", &u, uint64(9), ""},
		{"u64", nilPtr, uint64(0), ""},
		{"u64", nil, uint64(0), ""},
		{"u64", 2.0, uint64(2), ""},
		{"u64", 2.5, nil, "does not fit"},
		{"u64", "3", nil, "cannot put"},
		{"i32", int64(math.MinInt32), int32(math.MinInt32), ""},
		{"i32", uint64(math.MaxUint64), nil, "overflows"},
		{"f", float32(0.5), 0.5, ""},
		{"f", uint64(3), 3.0, ""},
		{"f", "0.5", nil, "cannot put"},
		{"b", uint8(1), true, ""},
		{"b", uint8(2), nil, "not a bool"},
		{"arr", []uint64{1, 2}, []uint32{1, 2}, ""},
		{"arr", []uint64{1 << 40}, nil, "element 0"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%T", tt.tag, tt.in), func(t *testing.T) {
			f := field(t, tt.tag)
			err := rowscan.Set(f, tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, f.Interface())
		})
	}
}

func TestParseInto(t *testing.T) {
	tests := []struct {
		tag     string
		text    string
		want    any
		wantErr string
	}{
		{"u64", "18446744073709551615", uint64(math.MaxUint64), ""},
		{"u64", "3.0", uint64(3), ""},
		{"u64", "-1", nil, "does not fit"},
		{"i32", "-5", int32(-5), ""},
		{"u8", "300", nil, "overflows"},
		{"f", "inf", math.Inf(1), ""},
		{"f", "-inf", math.Inf(-1), ""},
		{"f", "abc", nil, "into float64"},
		{"b", "true", true, ""},
		{"b", "0", false, ""},
		{"b", "2", nil, "not a bool"},
		{"s", "42", nil, "cannot put the number"},
	}
	for _, tt := range tests {
		t.Run(tt.tag+"/"+tt.text, func(t *testing.T) {
			f := field(t, tt.tag)
			err := rowscan.ParseInto(f, tt.text)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, f.Interface())
		})
	}
}

func TestDest(t *testing.T) {
	dest := []row{{S: "old"}}
	d, err := rowscan.New(&dest)
	require.NoError(t, err)
	require.Equal(t, []int{0, -1, 6}, d.Plan([]string{"s", "nope", "arr"}))
	d.Grow(1000)
	for i := range 1000 {
		d.Next().Field(0).SetString(string(rune('a' + i%26)))
	}
	require.Equal(t, []row{{S: "old"}}, dest, "the destination is untouched until Finish")
	d.Finish()
	require.Len(t, dest, 1000)
	require.Equal(t, "a", dest[0].S)
	require.Equal(t, "z", dest[25].S)
	require.Zero(t, dest[999].U64)

	for _, bad := range []any{nil, dest, &row{}, &[]int{}, (*[]row)(nil)} {
		_, err := rowscan.New(bad)
		require.ErrorIs(t, err, rowscan.ErrDest)
	}
}
