//go:build race

package harness

// RaceEnabled builds gateways with the race detector when the tests run with -race.
const RaceEnabled = true
