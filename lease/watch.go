package lease

import "time"

// relayWatch is this provider's evidence that it heard everything one relay
// accepted (rule 8's takeover and the retake rest on it). It is volatile:
// a new machine and a restored one watch no relay until RelaySynced.
//
// The delivery assumption (docs/reliability.md) makes a relay's live stream
// to one connection complete and ordered: each event the relay accepts that
// matches a subscription of the connection is written to it, events
// accepted at least RelayDelay apart in the order they were accepted, until
// the subscription or the connection ends. Storage is no evidence (relays
// may lose it; ephemeral heartbeats are never stored), so what a relay
// served from storage, and what it accepted before the current stream
// began, may be missing: watching starts when the stream's catch-up ended
// (RelaySynced) and ends at a RelayGap. Within it, the stream shows silence
// only up to what has come through it since: an own heartbeat created at c
// and received on the stream was accepted after c, so every event the relay
// accepted by c - RelayDelay was received before it. Silence is therefore
// shown up to c - RelayDelay for the newest such c, never up to now: a link
// that was cut a moment ago without the driver knowing (a silent network
// cut before the ping times out) shows nothing past its last own heartbeat.
type relayWatch struct {
	from   time.Time // when the current live stream began; zero: not watched
	proven time.Time // silence on the stream is shown up to here; zero: not yet
}

// RelayGap reports that this provider's live stream from relay may have
// missed events from now on: its connection ended or was made anew (before
// the new connection's catch-up is fed), or a subscription of it was closed
// or sent again. Until the relay's next RelaySynced, nothing it delivers
// shows silence (takeover, retake). The driver reports every gap it knows
// of; one it cannot know of (a cut link not yet detected) is covered by the
// proof's end at the last own heartbeat received.
func (m *Machine) RelayGap(now time.Time, relay string) {
	ri, ok := m.RelayIndex(relay)
	if !ok {
		return
	}
	m.clock(now)
	m.watch[ri] = relayWatch{}
}

// startWatch begins watching relay ri at now unless it is watched already
// (RelaySynced after a change of subscriptions that overlapped, with no gap).
func (m *Machine) startWatch(ri int, now time.Time) {
	if m.watch[ri].from.IsZero() {
		m.watch[ri] = relayWatch{from: now}
	}
}

// heardOwnBeat extends what relay ri's stream shows with an own heartbeat
// created at created and received at recv. It counts only when received
// on the current stream: what a relay serves before RelaySynced is its
// storage (a RelayGap comes before it), not its live stream.
func (m *Machine) heardOwnBeat(ri int, recv, created time.Time) {
	wr := &m.watch[ri]
	if wr.from.IsZero() || recv.Before(wr.from) {
		return
	}
	if shown := created.Add(-m.cfg.RelayDelay); shown.After(wr.proven) {
		wr.proven = shown
	}
}

// RelayShown reports that every event relay delivered to this provider
// before its own heartbeat created at created, received at received (fed
// earlier with Heartbeat.Unordered), has been fed: the relay's stream now
// shows silence up to it, as if the heartbeat had come in order.
func (m *Machine) RelayShown(now time.Time, relay string, created, received time.Time) {
	ri, ok := m.RelayIndex(relay)
	if !ok {
		return
	}
	m.clock(now)
	m.heardOwnBeat(ri, received.UTC(), created.UTC())
}

// Watching reports, per relay in relay-index order, whether this provider
// watches its live stream, and up to when the stream shows silence (zero
// when it shows none yet), for status and tests.
func (m *Machine) Watching() []RelayWatch {
	out := make([]RelayWatch, len(m.watch))
	for i, wr := range m.watch {
		out[i] = RelayWatch{Relay: m.relays[i], Since: wr.from, ShownUntil: wr.proven}
	}
	return out
}

// RelayWatch is one relay's entry of Watching.
type RelayWatch struct {
	Relay      string
	Since      time.Time // when the current live stream began; zero: not watched
	ShownUntil time.Time // the stream shows silence up to here
}

// silenceShown is the evidence test of the takeover and retake rules: is
// there an instant c such that, on at least N-M+1 watched relays, this
// provider's stream shows that nothing was accepted (of what since(r)
// measures from, for instance the holder's heartbeats) in [start_r, c],
// where start_r is the latest of since(r) and the stream's start, and
// c - start_r >= wait on each? One common c is needed, not a window per
// relay: the quorum-intersection argument rests on one stretch of time in
// which the holder could not have had quorum.
//
// It also waits: until the earliest such c plus proofLag, the longest a
// proof takes to come when own heartbeats come back in time. So the rule
// fires at a time set by the silence, not by the phase of this provider's
// own heartbeats, and standbys keep the order their waits give them (rank
// * RankStagger apart).
//
// due is when it can become true at the earliest without an input that
// touches the workload (since(r) and the streams' starts only grow); the
// caller may sleep until then, and must look at every tick after it.
func (m *Machine) silenceShown(now time.Time, wait time.Duration, since func(r int) time.Time) (shown bool, due time.Time) {
	var start, end, sorted [MaxRelays]time.Time
	n := len(m.relays)
	for r := range n {
		wr := m.watch[r]
		st := now // not watched: a stream that starts later starts after now
		if !wr.from.IsZero() {
			st = maxTime(since(r), wr.from)
		}
		start[r], end[r] = st.Add(wait), wr.proven
	}
	lag := m.proofLag()
	copy(sorted[:n], start[:n])
	sortTimes(sorted[:n])
	q := m.cfg.ReadQuorum()
	due = sorted[min(q, n)-1].Add(lag)
	if now.Before(due) {
		return false, due
	}
	// The earliest common c is one of the starts: try them in order.
	for _, c := range sorted[:n] {
		if now.Before(c.Add(lag)) {
			break
		}
		k := 0
		for r := range n {
			if !start[r].After(c) && !end[r].IsZero() && !end[r].Before(c) {
				k++
			}
		}
		if k >= q {
			return true, due
		}
	}
	return false, due
}

// sortTimes sorts ts in place (N is small: insertion sort, no allocation).
func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// proofLag is the longest an own heartbeat's proof lags the clock when
// heartbeats come back in time: one HeartbeatInterval between beats, the
// beat's RelayDelay to come back, and the RelayDelay the proof deducts.
// It is what the takeover and the retake cost on top of TakeoverAfter.
func (m *Machine) proofLag() time.Duration {
	return m.cfg.HeartbeatInterval + 2*m.cfg.RelayDelay
}
