package participant

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
)

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestCheckSubmissionsPerDay(t *testing.T) {
	lim := Limits{SubmissionsPerDay: 3, BytesPerSubmission: 1 << 30, GPUHoursPerWeek: 10}
	subs := func(ds ...time.Duration) Usage {
		var u Usage
		for i, d := range ds {
			u.Reserve(Spent{ID: string(rune('a' + i)), At: at(d)})
		}
		return u
	}
	tests := []struct {
		name  string
		u     Usage
		now   time.Time
		retry time.Time // zero: allowed
		text  string
	}{
		{"under the quota", subs(0, time.Hour), at(2 * time.Hour), time.Time{}, ""},
		{"at the quota: the oldest must leave", subs(0, time.Hour, 2*time.Hour), at(3 * time.Hour), at(24 * time.Hour),
			"example-team has made 3 submissions in the last 24 hours, its quota of 3 a day; the next submission is allowed at 2026-07-02T12:00:00Z (in 21h)"},
		{"over the quota (a lowered limit): two must leave", subs(time.Hour, 0, 3*time.Hour, 2*time.Hour), at(4 * time.Hour), at(25 * time.Hour),
			"has made 4 submissions in the last 24 hours"},
		{"the oldest left exactly a day after", subs(0, time.Hour, 2*time.Hour), at(24 * time.Hour), time.Time{}, ""},
		{"a minute before it leaves", subs(0, time.Hour, 2*time.Hour), at(24*time.Hour - time.Minute), at(24 * time.Hour), "(in 1m)"},
		{"entries of yesterday do not count", subs(-30*time.Hour, -25*time.Hour, 0, time.Hour), at(2 * time.Hour), time.Time{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.u.Check("example-team", lim, tt.now)
			if tt.retry.IsZero() {
				require.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			require.Equal(t, reason.QuotaSubmissionsPerDay, r.Code)
			require.Equal(t, tt.retry, r.RetryAt)
			require.Contains(t, r.Message, tt.text)
			// At the moment named, the submission is allowed.
			require.Nil(t, tt.u.Check("example-team", lim, r.RetryAt))
			require.NotNil(t, tt.u.Check("example-team", lim, r.RetryAt.Add(-time.Nanosecond)))
		})
	}
}

func TestCheckGPUHoursPerWeek(t *testing.T) {
	lim := Limits{SubmissionsPerDay: 100, BytesPerSubmission: 1 << 30, GPUHoursPerWeek: 2}
	charges := func(cs ...Charge) Usage {
		var u Usage
		for i, c := range cs {
			c.Event = string(rune('a' + i))
			u.Charge(c)
		}
		return u
	}
	day := func(n float64) time.Duration { return time.Duration(n * float64(Day)) }
	tests := []struct {
		name  string
		u     Usage
		now   time.Time
		retry time.Time
		text  string
	}{
		{"under", charges(Charge{At: at(0), Hours: 1.5}), at(day(1)), time.Time{}, ""},
		{"exactly at the quota", charges(Charge{At: at(0), Hours: 1}, Charge{At: at(day(1)), Hours: 1}), at(day(2)), at(Week),
			"example-team's submissions have used 2 GPU-hours in the last 7 days, its quota of 2 a week; the next submission is allowed at 2026-07-08T12:00:00Z (in 5d), when the oldest of those hours are a week old"},
		// 0.5 + 1 + 1.25 = 2.75: without the first, 2.25 is still at the
		// quota; without the second too, 1.25 is under it.
		{"two charges must leave", charges(Charge{At: at(day(2)), Hours: 1}, Charge{At: at(0), Hours: 0.5}, Charge{At: at(day(3)), Hours: 1.25}), at(day(4)), at(day(2) + Week),
			"have used 2.75 GPU-hours"},
		{"last week's hours do not count", charges(Charge{At: at(-Week), Hours: 5}, Charge{At: at(0), Hours: 1}), at(time.Hour), time.Time{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.u.Check("example-team", lim, tt.now)
			if tt.retry.IsZero() {
				require.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			require.Equal(t, reason.QuotaGPUHoursPerWeek, r.Code)
			require.Equal(t, tt.retry, r.RetryAt)
			require.Contains(t, r.Message, tt.text)
			require.Nil(t, tt.u.Check("example-team", lim, r.RetryAt))
			require.NotNil(t, tt.u.Check("example-team", lim, r.RetryAt.Add(-time.Nanosecond)))
		})
	}
}

func TestLedgerIsIdempotent(t *testing.T) {
	var u Usage
	require.True(t, u.Reserve(Spent{ID: "s1", At: at(0), Bytes: 10}))
	require.False(t, u.Reserve(Spent{ID: "s1", At: at(time.Hour), Bytes: 10}), "a retried reservation counts once")
	require.True(t, u.Charge(Charge{Event: "e1", Submission: "s1", At: at(0), Hours: 0.5}))
	require.False(t, u.Charge(Charge{Event: "e1", Submission: "s1", At: at(0), Hours: 0.5}), "a redelivered outcome charges once")
	require.True(t, u.Charge(Charge{Event: "e2", Submission: "s1", At: at(time.Hour), Hours: 0.25}))
	require.Equal(t, 1, u.SubmissionsAt(at(2*time.Hour)))
	require.InDelta(t, 0.75, u.GPUHoursAt(at(2*time.Hour)), 1e-12)
	require.True(t, u.Release("s1"))
	require.False(t, u.Release("s1"))
	require.Zero(t, u.SubmissionsAt(at(2*time.Hour)))

	u.Reserve(Spent{ID: "s2", At: at(0)})
	u.Prune(at(Day))
	require.Empty(t, u.Submissions, "a day-old submission leaves the ledger")
	require.Len(t, u.GPU, 2, "GPU time stays for a week")
	u.Prune(at(Week + time.Minute))
	require.Len(t, u.GPU, 1)
	require.Equal(t, "e2", u.GPU[0].Event)
}

func TestCheckBytes(t *testing.T) {
	lim := Limits{BytesPerSubmission: 2 << 30}
	require.Nil(t, lim.CheckBytes("team", 2<<30))
	r := lim.CheckBytes("team", 3<<30)
	require.NotNil(t, r)
	require.Equal(t, reason.QuotaBytesPerSubmission, r.Code)
	require.True(t, r.RetryAt.IsZero())
	require.Equal(t, `the upload is 3.0 GiB and team may upload at most 2.0 GiB per submission; a smaller bundle is allowed now, and a larger checkpoint is submitted by reference (checkpoint.json beside submission.json; see docs/participants/by-reference.md)`, r.Message)
}

func TestLimits(t *testing.T) {
	def := Limits{SubmissionsPerDay: 20, BytesPerSubmission: 2 << 30, GPUHoursPerWeek: 10}
	require.NoError(t, def.Validate(true))
	require.Equal(t, Limits{SubmissionsPerDay: 5, BytesPerSubmission: 2 << 30, GPUHoursPerWeek: 10}, Limits{SubmissionsPerDay: 5}.Or(def))
	require.Error(t, Limits{SubmissionsPerDay: 5}.Validate(true))
	require.NoError(t, Limits{SubmissionsPerDay: 5}.Validate(false))
	require.Error(t, Limits{GPUHoursPerWeek: -1}.Validate(false))
}

func TestUntil(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                  "0m",
		time.Second:                   "1m",
		time.Minute:                   "1m",
		61 * time.Second:              "2m",
		time.Hour:                     "1h",
		3*time.Hour + 12*time.Minute:  "3h12m",
		47*time.Hour + 59*time.Minute: "47h59m",
		2 * Day:                       "2d",
		5*Day + 3*time.Hour:           "5d3h",
	} {
		require.Equal(t, want, Until(t0, t0.Add(d)), d)
	}
}
