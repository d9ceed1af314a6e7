//go:build race

package props

// raceEnabled: CheckCI runs a sixteenth of each property's CI depth under
// the race detector (see CheckCI), and SkipSearchUnderRace skips the
// counterexample searches.
const raceEnabled = true
