//go:build race

package store_test

// raceEnabled says whether the tests run under the race detector.
const raceEnabled = true
