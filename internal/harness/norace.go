//go:build !race

package harness

const RaceEnabled = false
