//go:build !race

package ui_test

// raceDetector is true when the tests run with -race.
const raceDetector = false
