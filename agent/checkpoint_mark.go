package agent

import (
	"provideragent/heartbeat"
	"provideragent/lease"
	"provideragent/uploader"
)

// withCheckpointMarks returns held with, for each durable workload whose
// epoch published a checkpoint here, its newest one (seq and manifest):
// the evidence a standby's required restore never goes behind, carried by
// the heartbeats, which reach the standbys on the relays' live streams
// whatever the relays keep of the records. held itself is not changed
// (readers share it); without any mark it is returned as it is.
func (d *durables) withCheckpointMarks(held []heartbeat.WorkloadEpoch) []heartbeat.WorkloadEpoch {
	if d.publisher == nil {
		return held
	}
	var out []heartbeat.WorkloadEpoch
	for i, we := range held {
		m := d.checkpointMark(we.ID, we.Epoch)
		if m.IsZero() {
			if out != nil {
				out = append(out, we)
			}
			continue
		}
		if out == nil {
			out = append(make([]heartbeat.WorkloadEpoch, 0, len(held)), held[:i]...)
		}
		we.Checkpoint = m
		out = append(out, we)
	}
	if out == nil {
		return held
	}
	return out
}

// checkpointMark is the newest checkpoint this provider published of
// workload id at epoch (zero: none).
func (d *durables) checkpointMark(id string, epoch uint64) lease.CheckpointMark {
	last, ok := d.publisher.Named(id) // its blobs stay while a standby may hold this mark
	if !ok || last.Epoch != epoch || last.Seq == 0 {
		return lease.CheckpointMark{}
	}
	manifest := last.Manifest
	if manifest == "" {
		// Remembered from the ledger after a restart: its state_uri
		// names the manifest.
		ref, err := uploader.ParseBlossomURI(last.StateURI)
		if err != nil {
			return lease.CheckpointMark{}
		}
		manifest = ref.SHA256
	}
	return lease.CheckpointMark{Seq: last.Seq, Manifest: manifest}
}
