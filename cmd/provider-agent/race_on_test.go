//go:build race

package main

// raceEnabled: the fleet's agents are child processes the race detector
// does not instrument, so TestFleet runs without -race only: under it the
// harness alone would slow the package's other tests for nothing.
const raceEnabled = true
