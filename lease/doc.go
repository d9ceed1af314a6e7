// Package lease is the pure per-workload lease state machine of one provider:
// it decides, from heartbeats seen on M of N relays, revocations, promotion
// claims, process exits and the passage of time, when this provider starts,
// keeps, fences, hands off or takes over a workload. It performs no I/O, reads
// no clock and starts no goroutine: every input method takes now and returns
// the effects the driver must perform, in order, after persisting the
// machine's state (Snapshot, or Workload per workload).
//
// # Rules
//
// Comments across the project cite these rules by number:
//
//	 1  T1 is a debounce counted from the moment relay quorum was lost, not
//	    from entering Live.
//	 2  A healthy provider never flaps: quorum is a function of per-relay
//	    last-seen times, not of which observations arrived since the last
//	    tick.
//	 3  Heartbeats from the future (beyond MaxSkew) and replays (re-served or
//	    older events) never count.
//	 4  Signatures and signers are checked: heartbeats only from the provider
//	    they name; a revocation only from the workload's current holder at
//	    its epoch (and made under the current grant); a lease grant only from
//	    an allowed issuer.
//	 5  Respawn attempts are counted, backed off (doubling to a cap, reset
//	    after a healthy period) and end in Failed with an effect saying so;
//	    success is accepted only from Respawning.
//	 6  The restart policy applies to the workload process exiting. Loss of
//	    relay quorum evicts every workload whose lease names other members
//	    (warm-standby), whether or not one of them is alive now; for others
//	    it is reported, unless EvictWithoutStandby.
//	 7  Eviction fences: the holder stops its workload before it publishes
//	    the revocation, and the revocation goes through the durable outbox.
//	 8  Handoff has two triggers (the holder's revocation naming a successor;
//	    takeover after TakeoverAfter of the holder's silence on N-M+1 relays
//	    on which the standby itself is healthy) and one claim step: publish a
//	    claim for epoch+1, wait for M acceptances plus RelayDelay, read N-M+1
//	    relays, start only if no competing claim was seen, else withdraw and
//	    retry after a backoff staggered by rank. A revocation starts the
//	    claim step, and its read must complete, only before any takeover
//	    of the revoking holder could have begun (RevocationDeadline).
//	 9  Epochs fence everything: a provider that sees a higher epoch (claimed
//	    or held) for a workload it holds stops it at once; heartbeats list the
//	    (workload, epoch) pairs a provider holds.
//	10  State survives restarts: transitions are persisted before the effects
//	    that need them (stops and reports may run first; see BeforeCommit); a
//	    restarted holder does not resume Live before M relays synced with no
//	    higher epoch seen.
//	11  No Provisioning forever: a workload that reaches no quorum within
//	    ProvisionTimeout fails with a reason.
//
// Why rule 6 evicts a holder with no standby alive: once it goes silent,
// the other members of its lease may start the workload. A standby (the
// former primary rejoins as the last one after a failover) takes over after
// TakeoverAfter of silence; a former holder that evicted itself and never
// heard the higher epoch retakes after TakeoverAfter of watching; and the
// claim read they rely on may no longer find this holder's claim (relays
// may lose it once it was Live). Only its own eviction, within its
// self-fencing time, keeps them from a second copy. A lease that names
// nobody else has nobody who could: it keeps running and is reported.
//
// The members of a lease stand by for its holder in rank order: the lease's
// standbys without the holder, then the former primary (StandbysOf). A
// holder that is fenced (a higher epoch, or its own epoch held by a member
// the lease ranks first) stops its copy and rejoins as a standby of the
// holder it heard (or, fenced by a claim whose claimer it never hears
// holding, of that claimer once the claim has stood for the settle time a
// standby gives a rival claim: a claimer that failed or died before its
// first heartbeat is then taken over by silence, not left with nobody),
// so that a lease keeps a standby after a failover;
// Failed and Expired are the only terminal states. Ranks are distinct (a
// retaking former holder ranks after every member), so two claimers never
// back off in step.
//
// Beyond them: silence is counted only of the provider heard holding the
// epoch; an older version of a claim event never counts; a self-fenced
// primary whose standbys never claimed takes the workload back (retake),
// unless another provider is heard holding its epoch (claimed again once
// relays lost their storage: it is fenced for good instead), and not
// within TakeoverAfter of a heartbeat listing the workload at a lower
// epoch (a number reused after wipes: that provider runs it; a claim step
// under way, in flight or in its backoff, ends when one is heard); two holders
// of one epoch resolve by lease rank (the primary, then the standbys in
// order): the lower one fences itself when it hears the other's heartbeat;
// a node whose clock the driver finds outside the bound takes over
// nothing, claims nothing by revocation, and fences what it holds
// (SetClockSuspect).
//
// # Relay storage
//
// The guarantee allows relays to lose their storage at any time, except a
// promotion claim whose claimer still claims or holds that epoch and has
// not yet been Live at it for one HeartbeatInterval plus RelayDelay. The
// claim read is the only evidence of a claimer nobody has heard with
// quorum yet; afterwards its heartbeats are (a takeover or retake watches
// N-M+1 relays for TakeoverAfter and hears any holder that had quorum
// meanwhile, and any holder that had none fenced itself), and a claim by
// revocation reads before any other claim of the epoch can exist
// (RevocationDeadline). A revocation heard later says nothing about who
// runs the workload now, so it starts nothing: a successor that heard it
// late once claimed the epoch a takeover had already won, read relays that
// had lost the winner's claim, and ran beside it for good.
//
// # States
//
// Holder side (this provider runs the workload):
//
//	Track (primary) ──> provisioning ──quorum──> live ──T1 after loss──> suspect ──quorum──> live
//	                         │                    │                        │
//	                         │ provision_timeout  │ process exit           │ T1+T2 after loss
//	                         v                    v                        v
//	                       failed          respawning ──ok──> live      evicted (warm-standby, or
//	                                          │ exhausted                 │      evict_without_standby;
//	                                          v                           │      else quorum report only)
//	                                        failed                        v higher epoch seen
//	                                                                    fenced
//
// A successful respawn returns to provisioning instead of live when the
// workload never was live at its epoch, so rule 11 still bounds it.
// Any holding state (provisioning, live, suspect, respawning, syncing) goes
// to fenced at once when a higher epoch is seen (rule 9); fenced and
// evicted go on to standby once the holder of that epoch is heard, or the
// claim that fenced them has settled (rejoin).
// A restored machine
// puts live and suspect workloads in syncing until M relays synced (rule 10).
// Every non-terminal state goes to expired when the lease's ExpiresAt passes.
//
// Standby side:
//
//	Track (standby) ──> standby ──revocation naming us, or takeover──> promoting ──claim won──> provisioning
//	                       ^                                              │
//	                       └──── higher epoch held or claimed elsewhere ──┘
//
// # Driver protocol
//
// The driver (agent/, or the simulator in props/) owns one Machine, feeds it
// inputs from a single goroutine, persists the new state in the same
// transaction as any outbox rows, then performs the effects in slice order:
//
//   - StartWorkload / StopWorkload: start or stop the process.
//     StartWorkload/StopWorkload must be idempotent: the machine re-issues
//     them after a restart (a start for a process that may still run, a stop
//     for a process that may already be gone). A StopWorkload that precedes
//     a PublishRevocation must finish before the revocation is queued
//     (rule 7).
//   - Every effect has a durability class (DurabilityOf, see "Durability"
//     below); drivers perform effects through Perform, which dispatches on
//     it.
//   - PublishRevocation: queue a revocation (kind 38385) in the durable outbox.
//   - WithdrawClaim: queue the withdrawn marker that replaces this provider's
//     claim (same d tag) in the durable outbox.
//   - AnnouncePromotion: queue the Paygress-form announcement (kind 38386
//     under paygress:promoted:v1:<workload>) of a won claim in the durable
//     outbox. Claims and withdrawn markers use their own d tag: a Paygress
//     node reads every event under the announcement's as a promotion.
//   - EnteredState, Failed, QuorumReport: log and count.
//   - AttemptRespawn: restart the process at once, in order with the other
//     effects (do not wait for At, the time it was scheduled for: the
//     machine emits it only when it is due, from Tick, while the workload is
//     Respawning at that attempt and no relay sync is awaited), then call
//     RespawnDone with the same Attempt. The machine never leaves a respawn
//     scheduled in the driver, so an eviction or fencing that comes first
//     simply means no AttemptRespawn is emitted, and a late RespawnDone is
//     ignored.
//   - The claim step (rule 8), a feedback loop: PublishClaim → publish an
//     active claim to every relay, then call ClaimPublished with the number
//     of OK-true answers (once M accepted, or once all answered or timed
//     out). The machine answers ReadClaims{At} (or WithdrawClaim and a later
//     retry). At At, read the workload's claims from the relays, feed each
//     one with ObserveClaim, then call ClaimsRead with the number of relays
//     read to EOSE and the number of other providers with an active claim
//     carrying an epoch at or above it (Paygress announcements, which carry
//     none, are fed as they are: ObserveClaim records one that counts as a
//     rival, and ClaimsRead sees it there).
//     The machine answers StartWorkload and AnnouncePromotion (won) or WithdrawClaim (retry after
//     ClaimBackoff, driven by Tick). Feedback that never comes is timed out
//     by Tick after ClaimTimeout. ReadClaims is the only effect meant for
//     later: reading is harmless, and ClaimsRead decides from the state the
//     machine is in when the report arrives. Report each round's read
//     before the next round's ClaimPublished (reads bounded well below
//     ClaimTimeout, reports fed in order), so a report never outlives its
//     round.
//   - Call Tick periodically (about every second) and after observations;
//     call ObserveHeartbeat for every verified heartbeat from every relay,
//     ObserveClaim and ObserveRevocation for every verified kind 38386 and
//     38385 event, ProcessExited when a process exits. A Paygress
//     announcement (kind 38386 without an epoch) is fed unchanged, with
//     EpochUnknown and its created_at: the machine alone decides whether it
//     counts (an active claim of the next epoch when made after the current
//     holder began, allowing MaxSkew) or is an old event to ignore.
//   - Heartbeats this provider publishes list Held(): the (workload, epoch)
//     pairs it holds.
//   - After a restart: Restore and perform its effects (they begin with a
//     StopWorkload for every workload this provider does not hold, because
//     a stop persisted before the crash may never have been performed), then
//     re-issue Outstanding() (claim-step requests; no AttemptRespawn before
//     relay sync), subscribe, feed what each relay returns, and call
//     RelaySynced on each relay's EOSE. Performing Restore's stops before
//     the outbox sends anything keeps rule 7 across the crash. The sync's
//     last RelaySynced resumes Syncing workloads and starts Provisioning
//     ones again (StartWorkload), and re-issues any AttemptRespawn whose
//     RespawnDone the restart lost.
//
// # Durability
//
// Every effect has one durability class, and the agent and the simulator in
// props/ both perform effects through Perform, which dispatches on
// DurabilityOf (a Performer method per class and type), so they cannot
// perform an effect differently:
//
//	record    EnteredState, Failed, QuorumReport   log and count
//	process   StartWorkload, StopWorkload,         perform in slice order; idempotent,
//	          AttemptRespawn                       re-issued after a restart
//	outbox    PublishRevocation, WithdrawClaim,    outbox row committed with the step,
//	          AnnouncePromotion                    retried until M relays accepted it
//	feedback  PublishClaim, ReadClaims             sent directly; Outstanding re-issues
//	                                               them; ClaimTimeout bounds a round
//
// # Quorum and takeover bookkeeping
//
// Each provider named by a lease has a relay table: per relay, the local time
// of its last counting heartbeat, the created_at of the last accepted one
// (replays and older re-served events never count), and the start of its
// current unbroken stretch of heartbeats (no gap above HeartbeatInterval +
// RelayDelay). Quorum is a function of that table (QuorumUntil, updated in
// O(N) per heartbeat), so Tick never scans observations. A standby counts the
// holder's silence on a relay only from the latest of the holder's last claim
// there and the start of its own unbroken stretch there, so that its own
// outage or restart never passes for the holder's silence. The holder a
// standby follows can be a guess (adoptSettled follows a rival whose claim
// stood for the settle time; its withdrawal may have been lost): a heartbeat
// of another provider listing the workload at the followed epoch makes that
// provider the holder at once, so silence is only ever counted of the
// provider heard holding the epoch. Tick lets Live,
// Standby and Respawning workloads sleep until their next possible deadline
// (for Respawning: the respawn's due time, eviction, expiry); any input that
// could bring a deadline forward wakes them.
package lease
