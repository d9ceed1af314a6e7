package props

import (
	"fmt"
	"time"

	"provideragent/lease"
)

// Assumptions are the bounds the single-writer guarantee rests on. Within
// them, the props tests check that no two providers ever run a workload at
// the same instant; the TestAssumption... tests show a two-writer schedule
// once a bound is exceeded.
type Assumptions struct {
	// MaxClockOffset bounds each provider's wall-clock offset from true time.
	// Two providers then disagree by at most 2*MaxClockOffset = MaxSkew, so
	// every heartbeat that counts for its signer also counts, within
	// RelayDelay, for every observer (created_at stays inside
	// [received-Stale, received+MaxSkew]), which the quorum-intersection
	// argument of the takeover rule needs.
	MaxClockOffset time.Duration
	// MaxDriftPPM bounds each clock's rate error (parts per million). Drift
	// stretches the holder's self-fencing time and shrinks the standby's
	// takeover wait; it eats at most 2*MaxDriftPPM*1e-6*TakeoverAfter of the
	// margin.
	MaxDriftPPM int64
	// MaxDelay bounds publish-to-delivery through a relay that is up, on a
	// link that is not cut: lease.Config.RelayDelay. The claim step waits
	// this long after M relays accepted a claim. It is the timely part of
	// the delivery assumption, whose other parts the simulator holds every
	// world to: a relay never skips an event on a subscription it keeps (a
	// lost message ends the connection, sim.LinkFaults), events accepted
	// at least MaxDelay apart arrive in order on a connection (reordering
	// is within a leg's delay), and a node hears of every new connection
	// before anything it brings (sim.Node.Connected: lease's RelayGap).
	MaxDelay time.Duration
	// MaxPause bounds how long a provider's agent may stall while its
	// workload keeps running: a GC pause, a frozen VM, or an agent crash and
	// restart that leaves the workload process up. A stalled holder does not
	// self-fence, so the stall eats the margin directly.
	MaxPause time.Duration
	// AgentDeathGrace bounds how long a workload keeps running after its
	// agent died (not its node): the process backend's supervisor sees the
	// agent go and stops the workload, SIGKILL after backend.stop_grace. A
	// dead agent cannot fence, so this, like a pause, eats the margin.
	AgentDeathGrace time.Duration
	// StopGrace bounds how long a stop takes (backend.stop_grace: SIGTERM,
	// then SIGKILL): a holder that fences itself at the end of its
	// self-fencing time still runs this much longer, and so eats the margin
	// as a dead agent's workload does (AgentDeathGrace; one or the other
	// ends the same holder's run).
	StopGrace time.Duration
	// TickInterval is the longest the driver waits between two Ticks.
	TickInterval time.Duration
	// ClaimsKeptLive is the storage assumption: relays may lose their
	// storage at any time, any number of them, as often as they like, but
	// a relay does not lose a promotion claim while its claimer still
	// claims or holds that epoch and has not yet been Live at it for
	// ClaimsKeptLive (one heartbeat interval plus the relay delay: by then
	// every standby watching the relays heard its heartbeats, which no
	// storage loss erases). A relay that keeps every claim for
	// ClaimRetention(cfg) satisfies it.
	ClaimsKeptLive time.Duration
}

// ClaimRetention is how long a relay keeping every claim it accepted
// satisfies the storage assumption without knowing anything of its
// claimers: a claimer is Live or has fenced itself (evicted, T1+T2 after
// its claim began, or evicted or given up at ProvisionTimeout) within a claim step
// (2*ClaimTimeout) and T1+T2 of it, and is then heard for ClaimsKeptLive;
// a stop takes StopGrace more.
func (a Assumptions) ClaimRetention(cfg lease.Config) time.Duration {
	return 2*cfg.ClaimTimeout + cfg.T1 + cfg.T2 + a.StopGrace + a.ClaimsKeptLive
}

// Margin is the slack between the holder's self-fencing and a standby's
// takeover: TakeoverAfter - (T1+T2+Stale+MaxSkew+RelayDelay+1s), the
// amount by which it exceeds lease.Config.TakeoverFloor. lease's
// Config.Validate insists it is positive; ticks, drift, pauses and the
// eviction's stop must fit in it.
func Margin(cfg lease.Config) time.Duration {
	return cfg.TakeoverAfter - cfg.TakeoverFloor()
}

// AssumptionsFor states the bounds for a lease configuration: offsets within
// MaxSkew/2, drift within 1000 ppm (0.1 %, a hundred times a typical
// crystal), delays within RelayDelay, pauses within half the margin, a dead
// agent's workload stopped within the backend's default stop grace (10 s),
// and a tick every second.
func AssumptionsFor(cfg lease.Config) Assumptions {
	return Assumptions{
		MaxClockOffset:  cfg.MaxSkew / 2,
		MaxDriftPPM:     1000,
		MaxDelay:        cfg.RelayDelay,
		MaxPause:        Margin(cfg) / 2,
		AgentDeathGrace: 10 * time.Second,
		StopGrace:       10 * time.Second,
		TickInterval:    time.Second,
		ClaimsKeptLive:  cfg.HeartbeatInterval + cfg.RelayDelay,
	}
}

// DriftAllowance is how much of the margin clock drift can eat:
// 2*MaxDriftPPM*1e-6*TakeoverAfter, rounded up to a millisecond.
func (a Assumptions) DriftAllowance(cfg lease.Config) time.Duration {
	d := time.Duration(2 * a.MaxDriftPPM * int64(cfg.TakeoverAfter/time.Millisecond) / 1e6)
	return (d + 1) * time.Millisecond
}

// Validate checks that the bounds fit the configuration: clocks within
// MaxSkew, delays within RelayDelay, and pause, drift and tick together
// within the margin.
func (a Assumptions) Validate(cfg lease.Config) error {
	if 2*a.MaxClockOffset > cfg.MaxSkew {
		return fmt.Errorf("assumptions: max clock offset = %v, must be at most max_skew/2 = %v", a.MaxClockOffset, cfg.MaxSkew/2)
	}
	if a.MaxDelay > cfg.RelayDelay {
		return fmt.Errorf("assumptions: max delay = %v, must be at most relay_delay = %v", a.MaxDelay, cfg.RelayDelay)
	}
	if a.MaxDriftPPM < 0 || a.MaxDriftPPM >= 1e6 {
		return fmt.Errorf("assumptions: max drift = %d ppm, must be in [0, 1e6)", a.MaxDriftPPM)
	}
	if a.AgentDeathGrace < 0 {
		return fmt.Errorf("assumptions: agent death grace = %v, must not be negative (workloads must die with their agent)", a.AgentDeathGrace)
	}
	if a.StopGrace < 0 {
		return fmt.Errorf("assumptions: stop grace = %v, must not be negative", a.StopGrace)
	}
	if a.MaxDriftPPM > lease.MaxDriftPPM {
		return fmt.Errorf("assumptions: max drift = %d ppm, must be at most lease.MaxDriftPPM = %d (the revocation deadline allows that much)", a.MaxDriftPPM, lease.MaxDriftPPM)
	}
	if a.ClaimsKeptLive < cfg.HeartbeatInterval+cfg.RelayDelay {
		return fmt.Errorf("assumptions: claims kept %v after their claimer is Live, must be at least heartbeat_interval+relay_delay = %v",
			a.ClaimsKeptLive, cfg.HeartbeatInterval+cfg.RelayDelay)
	}
	// A pause can end in an agent crash or in the eviction's stop: either
	// eats the margin with the pause.
	end := max(a.AgentDeathGrace, a.StopGrace)
	if used := a.MaxPause + end + a.TickInterval + a.DriftAllowance(cfg); used > Margin(cfg) {
		return fmt.Errorf("assumptions: pause %v + max(agent death grace %v, stop grace %v) + tick %v + drift %v = %v, must fit the margin takeover_after-(t1+t2+stale+max_skew+relay_delay+1s) = %v",
			a.MaxPause, a.AgentDeathGrace, a.StopGrace, a.TickInterval, a.DriftAllowance(cfg), used, Margin(cfg))
	}
	return nil
}

// LivenessBound is the design's bound on failover time, measured from the
// instant the primary dies for good until some standby is Live, when at
// least one standby and max(M, N-M+1) relays stay healthy; k is the number
// of providers (primary included) and readTimeout how long the driver waits
// for a relay's answer to a claim read:
//
//	TakeoverAfter                       the takeover rule's silence
//	+ (k-2)*RankStagger                 stagger: the healthy standby's worst rank
//	+ propagation:
//	    RelayDelay                      the primary's last heartbeat reaches the standby
//	    HeartbeatInterval + 2*RelayDelay the standby's own heartbeat shows the silence
//	                                    (the proof lag, lease/watch.go)
//	    2*RelayDelay                    M relays accept the claim (publish and OK legs)
//	    RelayDelay                      the claim step's wait
//	    readTimeout                     the read (unhealthy relays time out)
//	    3*TickInterval                  ticks between the steps
//
// stretched by the drift bound.
func LivenessBound(cfg lease.Config, k int, a Assumptions, readTimeout time.Duration) time.Duration {
	stagger := time.Duration(max(k-2, 0)) * cfg.RankStagger()
	proofLag := cfg.HeartbeatInterval + 2*cfg.RelayDelay
	propagation := cfg.RelayDelay + proofLag + 2*cfg.RelayDelay + cfg.RelayDelay + readTimeout + 3*a.TickInterval
	b := cfg.TakeoverAfter + stagger + propagation
	return b + time.Duration(int64(b)/1e6*a.MaxDriftPPM)
}
