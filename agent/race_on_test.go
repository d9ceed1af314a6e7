//go:build race

package agent

// raceEnabled: the race detector slows signing and the machine loop 5-10x,
// so the scale tests run a smaller fleet under it (see TestScaleFailover).
const raceEnabled = true
