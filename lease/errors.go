package lease

import "errors"

// Sentinel errors; match them with errors.Is.
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("lease: invalid config")
	// ErrInvalidSpec wraps every Spec.Validate failure.
	ErrInvalidSpec = errors.New("lease: invalid spec")
	// ErrInvalidRelayURL is returned by NormalizeRelayURL.
	ErrInvalidRelayURL = errors.New("lease: invalid relay url")
	// ErrNotNamed: the spec names this provider neither as primary nor as
	// standby, so this machine has no role in the workload.
	ErrNotNamed = errors.New("lease: provider not named in lease")
	// ErrRelaySetMismatch: the spec's relay set or quorum differs from the
	// machine's; all providers must judge quorum over the same relays.
	ErrRelaySetMismatch = errors.New("lease: relay set mismatch")
	// ErrAlreadyTracked: a different spec with the same ID is already
	// tracked. Re-sending an identical spec, or one that only extends
	// ExpiresAt or changes StateURI, is not an error.
	ErrAlreadyTracked = errors.New("lease: workload already tracked")
	// ErrCannotHandOver: a planned handover was asked of a workload this
	// provider does not hold Live or Suspect at that epoch, or naming a
	// successor that does not stand by for it.
	ErrCannotHandOver = errors.New("lease: cannot hand over")
	// ErrInvalidSnapshot wraps every Restore failure.
	ErrInvalidSnapshot = errors.New("lease: invalid snapshot")
)
