//go:build !fleetbench

package main

import (
	"log/slog"

	"provideragent/backend"
	"provideragent/config"
)

// fleetRecordEnv names the record file of a fleetbench build's agent
// (fleetbackend_fleetbench.go); other builds ignore it.
const fleetRecordEnv = "PROVIDER_AGENT_FLEET_RECORD"

// fleetProcessMarker in a workload's command line has a fleetbench
// build's agent run it as a process even when it records the others.
const fleetProcessMarker = ": fleet-process;"

// fleetBackend is the fleet benchmark's backend in a binary built with
// -tags fleetbench (fleetbackend_fleetbench.go); in every other build it
// is never used.
func fleetBackend(config.Config, *slog.Logger) (backend.Backend, bool, error) { return nil, false, nil }
