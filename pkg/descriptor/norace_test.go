//go:build !race

package descriptor

const raceEnabled = false
