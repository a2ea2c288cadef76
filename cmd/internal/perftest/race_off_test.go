//go:build !race

package perftest

const raceEnabled = false
