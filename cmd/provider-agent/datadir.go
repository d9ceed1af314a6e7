package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"provideragent/backend"
	"provideragent/config"
)

// heldDataDir is a data dir this process holds as an agent does: its lock
// taken, what a killed agent on it left running killed, and the agent's
// secret key loaded. run and the commands that publish as the agent
// (courier --relays) take it the same way.
type heldDataDir struct {
	lock   *os.File
	secret string
}

// holdDataDir takes cfg's data dir: it must be writable; its lock is
// taken (a *dataDirLockedError when another process holds it); a data dir
// whose mode others may read is reported; the workloads a killed agent's
// supervisors left (and, for the podman backend, its containers) are
// killed before anything that can fail, so that no earlier agent's
// workload keeps running because this one cannot read its key; and the
// key file is loaded. Close releases the lock.
func holdDataDir(ctx context.Context, cfg config.Config, logger *slog.Logger) (*heldDataDir, error) {
	dir := cfg.Agent.DataDir
	if err := checkWritable(dir); err != nil {
		return nil, fmt.Errorf("data dir %s is not writable (%s): the agent creates %s, its -wal and -shm files, %s and logs/ there",
			dir, pathErrCause(err), config.DBFileName, lockFileName)
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	h := &heldDataDir{lock: lock}
	if err := config.CheckDataDirMode(dir); errors.Is(err, config.ErrDataDirMode) {
		logger.Warn(err.Error())
	}
	if _, err := backend.KillLeftovers(cfg.BackendLogDir(), logger); err != nil {
		h.Close()
		return nil, err
	}
	if cfg.Backend.Kind == "podman" {
		if _, err := backend.KillPodmanLeftovers(ctx, cfg.Backend.Podman, cfg.BackendLogDir(), logger); err != nil {
			h.Close()
			return nil, err
		}
	}
	h.secret, err = config.LoadKeyFile(cfg.KeyFilePath())
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("no identity key at %s: create one with 'provider-agent keygen --out %s' (or point agent.key_file / --key-file at yours)",
			cfg.KeyFilePath(), cfg.KeyFilePath())
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// Close releases the data dir's lock.
func (h *heldDataDir) Close() { _ = h.lock.Close() }
