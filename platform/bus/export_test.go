package bus

import "time"

// SetAckTimeout shortens the settling deadline for a test and returns a
// function that restores it.
func SetAckTimeout(d time.Duration) func() {
	old := ackTimeout
	ackTimeout = d
	return func() { ackTimeout = old }
}
