package retention_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store/retention"
)

// The job itself runs against both engines in the store contract suite
// (storetest, "Retention"); these are its age flags.
func TestParseAge(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"30d", 30 * day, false},
		{"1d", day, false},
		{"36h", 36 * time.Hour, false},
		{"24h", day, false},
		{"23h", 0, true},
		{"0d", 0, true},
		{"0", 0, true},
		{"-3d", 0, true},
		{"d", 0, true},
		{"1.5d", 0, true},
		{"thirty", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := retention.ParseAge(tt.in)
			if tt.wantErr {
				require.ErrorIs(t, err, retention.ErrAge)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			again, err := retention.ParseAge(retention.FormatAge(got))
			require.NoError(t, err)
			require.Equal(t, got, again, "FormatAge writes what ParseAge reads")
		})
	}
}

func TestAgeFlag(t *testing.T) {
	a := retention.Age(30 * 24 * time.Hour)
	require.Equal(t, "30d", a.String())
	require.NoError(t, a.Set("36h"))
	require.Equal(t, retention.Age(36*time.Hour), a)
	require.Equal(t, "36h0m0s", a.String())
	require.ErrorIs(t, a.Set("2h"), retention.ErrAge)
	require.Equal(t, retention.Age(36*time.Hour), a, "a refused value leaves the flag as it was")
}
