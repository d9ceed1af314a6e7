package lease

// Performer is how a driver performs effects, one method per kind of work.
// Perform is the one table from effect to method: the agent and the
// simulator in props/ both perform every effect through it, so neither can
// perform an effect in a way the other does not (a withdrawn marker sent
// fire-and-forget by one and through the outbox by the other, say).
//
// The method an effect reaches is one of its durability class's
// (DurabilityOf).
type Performer interface {
	// Record (class Record): log and count EnteredState, Failed,
	// QuorumReport and RestoreReport. Nothing else.
	Record(Effect)
	// Start, Stop and Respawn (class Process): start, stop or restart the
	// workload process, in slice order. Respawn reports RespawnDone.
	Start(StartWorkload)
	Stop(StopWorkload)
	Respawn(AttemptRespawn)
	// Queue (class Outbox): PublishRevocation, WithdrawClaim and
	// AnnouncePromotion. The event's outbox row is committed with the step
	// (the driver writes it in the step's transaction) and the outbox sends
	// and retries it until M relays accepted it; never sent directly.
	Queue(Effect)
	// PublishClaim and ReadClaims (class Feedback): the claim step's
	// requests, sent directly; their answers are fed back to the machine
	// (ClaimPublished, ObserveClaim and ClaimsRead).
	PublishClaim(PublishClaim)
	ReadClaims(ReadClaims)
	// Restore (class Feedback): fetch, verify and place the checkpoint a
	// new epoch starts from; the outcome is fed back (Restored).
	Restore(RestoreCheckpoint)
}

// Perform hands e to its Performer method (see Performer): the process
// and feedback effects by type, the rest by class (Outbox: Queue; Record:
// Record). lease's tests check that every effect type reaches a method of
// its DurabilityOf class.
func Perform(p Performer, e Effect) {
	switch e := e.(type) {
	case StartWorkload:
		p.Start(e)
	case StopWorkload:
		p.Stop(e)
	case AttemptRespawn:
		p.Respawn(e)
	case PublishClaim:
		p.PublishClaim(e)
	case ReadClaims:
		p.ReadClaims(e)
	case RestoreCheckpoint:
		p.Restore(e)
	default:
		if DurabilityOf(e) == Outbox {
			p.Queue(e)
		} else {
			p.Record(e)
		}
	}
}
