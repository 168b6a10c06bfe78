package cluster

import (
	"fmt"
	"strings"
)

// Fault is one row of the fault table: what was done, how often, over
// how much of the arena's work, and what it cost.
type Fault struct {
	// Fault says what was done.
	Fault string
	// Count is how many times.
	Count int
	// Events is the ARENA stream's event count the row was checked
	// against; Submissions the submissions; Rows the store rows looked
	// for.
	Events, Submissions, Rows int
	// Lost and Duplicated count what the checks found lost (a
	// submission that never ended or ended otherwise than a healthy run,
	// an event gone from the log, a row missing) and held twice (a fact
	// published twice, a row twice under FINAL); DeadLettered the
	// messages dead-lettered.
	Lost, Duplicated, DeadLettered int
	// Note says what else was seen.
	Note string
}

// Table is the fault table.
type Table []Fault

// Markdown renders the table as docs/developers/benchmarks.md shows it.
func (t Table) Markdown() string {
	var b strings.Builder
	b.WriteString("| fault | count | events | submissions | rows checked | lost | duplicated | dead-lettered | seen |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	dash := func(n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, f := range t {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d | %d | %d | %s |\n", f.Fault, f.Count, dash(f.Events), dash(f.Submissions), dash(f.Rows),
			f.Lost, f.Duplicated, f.DeadLettered, f.Note)
	}
	return b.String()
}
