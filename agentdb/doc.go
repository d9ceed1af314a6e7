// Package store persists the agent daemon's state in the shared SQLite file:
// one row per workload (the lease machine's snapshot as JSON), the
// subscription cursor per relay (writes never lower it; only ClampCursor
// pulls one that lies in the future back to the clock), a small
// key/value table, and the schema of the operator command queue (grants and
// releases the CLI queues for the running agent; agent/ reads and writes it). Writes take the caller's *sql.Tx so that a machine step,
// its cursor and the courier's outbox rows commit in one transaction.
//
// CursorTracker computes the safe cursor while events finish out of order:
// the highest point below which every event has finished. Events not yet
// validated are reserved: they hold the cursor back while in flight but
// move it only once accepted, so a rejected (forged, future-dated) event
// never moves it.
package agentdb
