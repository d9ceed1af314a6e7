// Package props holds the property tests of provider-agent's single-writer
// rule. The multi-provider simulator lives in props/sim: K providers, each
// running its own lease machine driven exactly as the agent drives it, talk
// through N simulated relays while pgregory.net/rapid chooses the faults
// (partitions, relay crashes, delays, loss, duplicates, replays, provider
// crashes, pauses, clock offset and drift). The tests check, after every
// simulated event, that no two providers run a workload at once, and show
// with counterexamples what breaks when each stated assumption is dropped.
package props
