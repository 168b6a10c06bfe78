package participant

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Quota windows: a participant's submissions count for a day, its
// GPU-hours for a week, both rolling (an entry leaves the window exactly
// one window after it was made), so the refusal can name the moment the
// next submission is allowed.
const (
	Day  = 24 * time.Hour
	Week = 7 * Day
)

// Limits are a participant's quotas. In the arena's defaults every field
// is positive; in a participant's overrides a zero field keeps the
// default.
type Limits struct {
	SubmissionsPerDay  int     `json:"submissions_per_day,omitempty"`
	BytesPerSubmission int64   `json:"bytes_per_submission,omitempty"`
	GPUHoursPerWeek    float64 `json:"gpu_hours_per_week,omitempty"`
}

// Or returns l with every zero field taken from def.
func (l Limits) Or(def Limits) Limits {
	if l.SubmissionsPerDay <= 0 {
		l.SubmissionsPerDay = def.SubmissionsPerDay
	}
	if l.BytesPerSubmission <= 0 {
		l.BytesPerSubmission = def.BytesPerSubmission
	}
	if l.GPUHoursPerWeek <= 0 {
		l.GPUHoursPerWeek = def.GPUHoursPerWeek
	}
	return l
}

// Validate reports a limit that is negative (or, with complete, one that
// is not set).
func (l Limits) Validate(complete bool) error {
	switch {
	case l.SubmissionsPerDay < 0 || l.BytesPerSubmission < 0 || l.GPUHoursPerWeek < 0 || math.IsNaN(l.GPUHoursPerWeek) || math.IsInf(l.GPUHoursPerWeek, 0):
		return fmt.Errorf("participant: a quota is negative or not a number: %+v", l)
	case complete && (l.SubmissionsPerDay == 0 || l.BytesPerSubmission == 0 || l.GPUHoursPerWeek == 0):
		return fmt.Errorf("participant: every default quota must be positive: %+v", l)
	}
	return nil
}

// Refusal is a request refused for a participant's quota: a stable code,
// a sentence that says when the next submission is allowed, and that
// moment (zero when a smaller submission is allowed at once).
type Refusal struct {
	Code    reason.Code
	Message string
	RetryAt time.Time
}

// Error returns the code and the sentence.
func (r *Refusal) Error() string { return string(r.Code) + ": " + r.Message }

// Spent is one submission counted against a participant's daily quota.
type Spent struct {
	ID    string    `json:"id"`
	At    time.Time `json:"at"`
	Bytes int64     `json:"bytes"`
}

// Charge is one runner job's GPU time counted against the participant
// whose submission it served.
type Charge struct {
	// Event is the id of the job outcome the hours come from: the key
	// that makes charging idempotent.
	Event      string    `json:"event"`
	Submission string    `json:"submission"`
	Job        string    `json:"job,omitempty"`
	At         time.Time `json:"at"`
	Hours      float64   `json:"hours"`
}

// Usage is a participant's ledger within the quota windows.
type Usage struct {
	Submissions []Spent  `json:"submissions"`
	GPU         []Charge `json:"gpu"`
}

// Prune drops what lies outside the windows at now: submissions made a
// day or more ago, GPU time charged a week or more ago.
func (u *Usage) Prune(now time.Time) {
	u.Submissions = slices.DeleteFunc(u.Submissions, func(s Spent) bool { return !now.Before(s.At.Add(Day)) })
	u.GPU = slices.DeleteFunc(u.GPU, func(c Charge) bool { return !now.Before(c.At.Add(Week)) })
}

// Reserve counts submission s, unless it is counted already (a retry);
// it reports whether the ledger changed.
func (u *Usage) Reserve(s Spent) bool {
	if slices.ContainsFunc(u.Submissions, func(x Spent) bool { return x.ID == s.ID }) {
		return false
	}
	u.Submissions = append(u.Submissions, s)
	return true
}

// Release uncounts submission id (its upload failed before it was
// submitted); it reports whether the ledger changed.
func (u *Usage) Release(id string) bool {
	n := len(u.Submissions)
	u.Submissions = slices.DeleteFunc(u.Submissions, func(x Spent) bool { return x.ID == id })
	return len(u.Submissions) != n
}

// Charge counts c, unless its event is counted already (a redelivery);
// it reports whether the ledger changed.
func (u *Usage) Charge(c Charge) bool {
	if slices.ContainsFunc(u.GPU, func(x Charge) bool { return x.Event == c.Event }) {
		return false
	}
	u.GPU = append(u.GPU, c)
	return true
}

// SubmissionsAt counts the submissions within the day before now.
func (u Usage) SubmissionsAt(now time.Time) int {
	return len(u.submissionTimes(now))
}

// GPUHoursAt sums the GPU-hours charged within the week before now.
func (u Usage) GPUHoursAt(now time.Time) float64 {
	sum := 0.0
	for _, c := range u.GPU {
		if now.Before(c.At.Add(Week)) {
			sum += c.Hours
		}
	}
	return sum
}

func (u Usage) submissionTimes(now time.Time) []time.Time {
	var ts []time.Time
	for _, s := range u.Submissions {
		if now.Before(s.At.Add(Day)) {
			ts = append(ts, s.At)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

// Check refuses one more submission by name at now when the day's
// submissions or the week's GPU-hours are at the limits l, saying when
// the next one is allowed: when enough of the oldest entries have left
// their window.
func (u Usage) Check(name string, l Limits, now time.Time) *Refusal {
	if ts := u.submissionTimes(now); l.SubmissionsPerDay > 0 && len(ts) >= l.SubmissionsPerDay {
		// The (len-limit+1) oldest must leave; the last of them leaves a
		// day after it was made.
		at := ts[len(ts)-l.SubmissionsPerDay].Add(Day)
		return &Refusal{Code: reason.QuotaSubmissionsPerDay, RetryAt: at, Message: fmt.Sprintf(
			"%s has made %d submissions in the last 24 hours, its quota of %d a day; the next submission is allowed at %s (in %s)",
			name, len(ts), l.SubmissionsPerDay, stamp(at), Until(now, at))}
	}
	if used := u.GPUHoursAt(now); l.GPUHoursPerWeek > 0 && used >= l.GPUHoursPerWeek {
		var in []Charge
		for _, c := range u.GPU {
			if now.Before(c.At.Add(Week)) {
				in = append(in, c)
			}
		}
		sort.Slice(in, func(i, j int) bool { return in[i].At.Before(in[j].At) })
		left, at := used, now
		for _, c := range in {
			left -= c.Hours
			at = c.At.Add(Week)
			if left < l.GPUHoursPerWeek {
				break
			}
		}
		return &Refusal{Code: reason.QuotaGPUHoursPerWeek, RetryAt: at, Message: fmt.Sprintf(
			"%s's submissions have used %s GPU-hours in the last 7 days, its quota of %s a week; the next submission is allowed at %s (in %s), when the oldest of those hours are a week old",
			name, hours(used), hours(l.GPUHoursPerWeek), stamp(at), Until(now, at))}
	}
	return nil
}

// CheckBytes refuses an upload of n bytes over the per-submission limit.
// A smaller submission is allowed at once, so the refusal has no
// RetryAt; it points to submitting by reference.
func (l Limits) CheckBytes(name string, n int64) *Refusal {
	if l.BytesPerSubmission <= 0 || n <= l.BytesPerSubmission {
		return nil
	}
	return &Refusal{Code: reason.QuotaBytesPerSubmission, Message: fmt.Sprintf(
		"the upload is %s and %s may upload at most %s per submission; a smaller bundle is allowed now, and a larger checkpoint is submitted by reference "+
			"(checkpoint.json beside submission.json; see docs/participants/by-reference.md)",
		bundle.HumanSize(n), name, bundle.HumanSize(l.BytesPerSubmission))}
}

func hours(h float64) string {
	return fmt.Sprintf("%.4g", h)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Until writes the wait from now to at for people, to the minute above
// ("3h12m", "2d4h", "1m").
func Until(now, at time.Time) string {
	d := at.Sub(now)
	if d <= 0 {
		return "0m"
	}
	mins := int64((d + time.Minute - 1) / time.Minute)
	days, h, m := mins/(24*60), mins/60%24, mins%60
	switch {
	case days >= 2:
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	case mins >= 60:
		if m == 0 {
			return fmt.Sprintf("%dh", mins/60)
		}
		return fmt.Sprintf("%dh%dm", mins/60, m)
	}
	return fmt.Sprintf("%dm", mins)
}
