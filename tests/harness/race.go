//go:build race

package harness

// raceEnabled builds gateways with the race detector when the tests run with -race.
const raceEnabled = true
