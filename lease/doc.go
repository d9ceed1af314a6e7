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
//	11  No Provisioning forever: a workload that reaches no quorum (or,
//	    restarted, no relay sync) within ProvisionTimeout is evicted if
//	    quorum loss would evict it (rule 6: warm-standby, or
//	    EvictWithoutStandby), else fails with a reason; one whose required
//	    restore has not placed a checkpoint by then is evicted too. An
//	    evicted one is handed on and may be taken back by the retake rule:
//	    a relay or Blossom outage is not forever, and each attempt stays
//	    bounded.
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
// quorum yet; afterwards its heartbeats are, on the live streams of the
// relays (a takeover or retake shows TakeoverAfter of silence on the live
// streams of N-M+1 relays, so it would have heard any holder that had
// quorum meanwhile: see "The takeover argument"; storage is no evidence),
// and a claim by revocation reads before any other claim of the epoch can
// exist (RevocationDeadline). A revocation heard later says nothing about
// who runs the workload now, so it starts nothing: a successor that heard
// it late once claimed the epoch a takeover had already won, read relays
// that had lost the winner's claim, and ran beside it for good.
//
// # The takeover argument
//
// Assumptions, named where a step uses them:
//
//	A1 clocks    each within ±MaxSkew/2 of true time, at most 1000 ppm off
//	             in rate, never stepped
//	A2 delivery  per connection, a relay hands each event it accepted to
//	             every subscription that matches it; it never skips one on
//	             a subscription it keeps (it ends the subscription, CLOSED,
//	             or the connection instead); events it accepted at least
//	             RelayDelay apart arrive in the order it accepted them; on
//	             a link that is not cut, within RelayDelay. What a relay
//	             serves from storage (a new subscription's catch-up) is no
//	             part of it, nor what it accepted before the subscription
//	             was caught up.
//	A3 storage   as in "Relay storage" above
//	A4 driver    reports a RelayGap before it feeds anything of a new
//	             connection or of a REQ sent again, and every gap it knows
//	             of (a CLOSED, a REQ closed before its replacement caught
//	             up); feeds what a stream delivered in its order (an own
//	             heartbeat fed ahead is Unordered until RelayShown)
//	A5 margin    pauses, ticks, drift and the eviction's stop fit in
//	             TakeoverAfter - TakeoverFloor (props.Assumptions)
//
// The steps, for a standby S that claims by takeover against holder H:
//
//  1. S's relay watch (watch.go): S claims only if, on a set R of N-M+1
//     relays, each r in R has a live stream watched since w_r (RelaySynced,
//     no RelayGap since), H's last heartbeat listing the workload came on
//     it at h_r, and an own heartbeat created at or after c + RelayDelay
//     came on it, for one instant c >= max(w_r, h_r) + TakeoverAfter.
//  2. By A2 and A4, each r in R accepted no heartbeat of H listing the
//     workload in (max(w_r, h_r), c]: r accepted S's own heartbeat after
//     its creation, so at least RelayDelay after any such beat, which
//     would have come before it on the same unbroken stream.
//  3. H has quorum at t only with counting heartbeats seen on M relays in
//     [t - Stale, t], and it counts its own heartbeat as seen at most
//     1 s + RelayDelay after its created_at, on its own clock (A1: one
//     clock, no steps). Any M relays include one of R (|R| = N-M+1), so H
//     had no quorum from max(w_r, h_r) + Stale + RelayDelay + 1 s (plus
//     MaxSkew for the two clocks, A1) until c.
//  4. H therefore evicts itself T1+T2 after it lost quorum, by its clock,
//     and cannot regain Live without a claim step; by Config.Validate
//     (TakeoverAfter > T1+T2+Stale+MaxSkew+RelayDelay+1s: TakeoverFloor)
//     and A5 its copy stopped before c.
//  5. S claims at or after c + RelayDelay and starts only after the claim
//     step (rule 8), whose reads meet every other claim of the epoch by
//     quorum intersection and A3.
//
// The retake is the same with H any provider holding a higher epoch (its
// claims and heartbeats), from the eviction on. The cost in liveness: a
// takeover comes proofLag (HeartbeatInterval + 2*RelayDelay, 80 s with the
// defaults) after TakeoverAfter of silence, and a relay's silence counts
// only from its stream's last start: a standby whose connections break
// more often than every TakeoverAfter on more than M-1 relays, or whose
// own heartbeats do not come back, never takes over.
//
// Two holders of one epoch (possible only when a relay lost a protected
// claim, outside A3) resolve by lease rank once each hears the other's
// heartbeats; with 2M > N their quorum relays overlap, so they do while
// both have quorum. The steps above use only the intersection of M and
// N-M+1 relays, which holds for every M, so Config.Validate does not ask
// for 2M > N; the agent says at start when a lease's quorum has no such
// second line of defence.
//
// # States
//
// Holder side (this provider runs the workload):
//
//	Track (primary) ──> provisioning ──quorum──> live ──T1 after loss──> suspect ──quorum──> live
//	                         │                    │                        │
//	                         │ provision_timeout  │ process exit           │ T1+T2 after loss
//	                         v                    v                        v
//	                  evicted*            respawning ──ok──> live      evicted (warm-standby, or
//	                                          │ exhausted                 │      evict_without_standby;
//	                                          v                           │      else quorum report only)
//	                                        failed                        v higher epoch seen
//	                                                                    fenced
//
// *at provision_timeout: evicted when quorum loss would evict it (or its
// required restore placed nothing), else failed (rule 11); a best-effort
// restore still running then starts the workload without a checkpoint.
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
// The driver (package driver, and its Shell, which the agent and the
// simulator in props/ both run) owns one Machine, feeds it inputs from a
// single goroutine, persists the new state in the same transaction as any
// outbox rows, then performs the effects in slice order:
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
//     by Tick after ClaimTimeout. At most Config.ClaimWindow workloads wait
//     for ClaimPublished at once: a claim step due beyond it begins (or
//     retries) at a later Tick, once answers have freed a slot, so answer
//     every PublishClaim, even with zero relays. ReadClaims is the only effect meant for
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
//   - Relay streams (watch.go): call RelayGap when a relay's live stream
//     may have missed events (a connection ended or begins, before
//     anything of the new one is fed; a CLOSED; a REQ sent again) and
//     RelaySynced at each EOSE after it. Feed a relay's events in the
//     order it delivered them; an own heartbeat fed ahead of events that
//     came before it (for quorum) carries Heartbeat.Unordered, and
//     RelayShown reports it once those were fed.
//   - Heartbeats this provider publishes list Held(): the (workload, epoch)
//     pairs it holds.
//   - After a restart: Restore and perform its effects (they begin with a
//     StopWorkload for every workload this provider does not hold, because
//     a stop persisted before the crash may never have been performed), then
//     re-issue Outstanding() (claim-step requests; no AttemptRespawn before
//     relay sync), subscribe, feed what each relay returns, and call
//     RelaySynced on each relay's EOSE (on every connection, and after
//     every RelayGap: the takeover argument's A4). Performing Restore's
//     stops before the outbox sends anything keeps rule 7 across the
//     crash. The sync's
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
// of its last counting heartbeat and the created_at of the last accepted one
// (replays and older re-served events never count). Quorum is a function of
// that table (QuorumUntil, updated in O(N) per heartbeat), so Tick never
// scans observations. The machine also keeps, per relay and never persisted,
// its watch of the relay's live stream (watch.go): when the stream began and
// up to when it shows silence. A standby counts the holder's silence on a
// relay only from the latest of the holder's last claim there, the start of
// following the holder and the stream's start, and only up to what the
// stream shows, so that its own outage, restart or a missed delivery never
// passes for the holder's silence. The holder a standby follows can be a
// guess (adoptSettled follows a rival whose claim stood for the settle time;
// its withdrawal may have been lost): a heartbeat of another provider
// listing the workload at the followed epoch makes that provider the holder
// at once, so silence is only ever counted of the provider heard holding the
// epoch. Tick lets Live, Standby and Respawning workloads sleep until their
// next possible deadline (for Respawning: the respawn's due time, eviction,
// expiry); any input that could bring a deadline forward wakes them.
package lease
