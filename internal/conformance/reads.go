package conformance

import (
	"time"

	"provideragent/heartbeat"
	"provideragent/internal/imagespec"
)

// reads is what the agent read from an accepted event, with the defaults
// it applied (a Paygress revocation's successor, an absent epoch), as JSON
// fields named as on the wire. Times are unix seconds; 0 means none.
func reads(got heartbeat.Ingested) map[string]any {
	switch {
	case got.Heartbeat != nil:
		return heartbeatReads(got.Heartbeat, got.Event.Kind)
	case got.Revocation != nil:
		r := got.Revocation
		return map[string]any{
			"type": "revocation", "workload_id": r.WorkloadID, "primary": r.Primary,
			"standbys": nonNil(r.Standbys), "successor": r.Successor, "epoch": epoch(r.Epoch, r.HasEpoch),
			"reason": r.Reason, "revoked_at": r.RevokedAt.Unix(), "state_uri": r.StateURI, "quorum_at_ms": unixMilli(r.QuorumAt),
		}
	case got.Promotion != nil:
		p := got.Promotion
		typ := "claim"
		if p.Announcement {
			typ = "announcement"
		}
		return map[string]any{
			"type": typ, "workload_id": p.WorkloadID, "new_primary": p.NewPrimary,
			"epoch": epoch(p.Epoch, p.HasEpoch), "status": string(p.Status), "promoted_at": p.PromotedAt.Unix(),
		}
	case got.LeaseGrant != nil:
		return grantReads(got.LeaseGrant)
	case got.Checkpoint != nil:
		c := got.Checkpoint
		return map[string]any{
			"type": "checkpoint", "workload_id": c.WorkloadID, "holder": c.Holder, "epoch": c.Epoch, "seq": c.Seq,
			"manifest": c.Manifest, "manifest_size": c.ManifestSize, "size": c.Size, "sha256": c.SHA256,
			"taken_at_ms": unixMilli(c.TakenAt), "servers": nonNil(c.Servers), "state_uri": c.StateURI,
			"grant_at": c.GrantAt.Unix(), "parent": c.Parent, "final": c.Final, "fresh": c.Fresh,
		}
	}
	return nil
}

func heartbeatReads(h *heartbeat.Heartbeat, kind int) map[string]any {
	typ := "heartbeat"
	switch kind {
	case heartbeat.KindHeartbeatEphemeral:
		typ = "heartbeat_ephemeral"
	case heartbeat.KindHeartbeatShard:
		typ = "heartbeat_shard"
	}
	ws := make([]map[string]any, 0, len(h.Workloads))
	for _, w := range h.Workloads {
		ws = append(ws, map[string]any{"id": w.ID, "epoch": w.Epoch})
	}
	m := map[string]any{
		"type": typ, "provider": h.Provider, "timestamp": h.Timestamp.Unix(), "expiration": unix(h.Expiration),
		"lists_workloads": h.ListsWorkloads, "workloads": ws, "shard": h.Shard, "shards": h.Shards,
	}
	if kind != heartbeat.KindHeartbeatShard {
		m["active_workloads"] = h.ActiveWorkloads
		m["available_capacity"] = map[string]any{
			"cpu_available": h.Capacity.CPUAvailable, "memory_mb_available": h.Capacity.MemoryMBAvailable,
			"storage_gb_available": h.Capacity.StorageGBAvailable,
		}
	}
	return m
}

func grantReads(g *heartbeat.LeaseGrant) map[string]any {
	s := heartbeat.SpecOf(g)
	rp := map[string]any{"policy": string(s.RestartPolicy.Policy), "max_attempts": s.RestartPolicy.MaxAttempts}
	m := map[string]any{
		"type": "lease_grant", "issuer": g.Issuer, "workload_id": s.ID, "primary": s.Primary, "standbys": nonNil(s.Standbys),
		"relays": s.Relays, "quorum": s.Quorum, "replication": string(s.Replication), "restart_policy": rp,
		"epoch": s.Epoch, "expires_at": unix(s.ExpiresAt), "state_uri": s.StateURI, "manifest": g.Manifest,
	}
	// The command as on the wire: the argv, and the image apart.
	if im, argv, ok, err := imagespec.Decode(s.Command); ok && err == nil {
		m["image"] = im
		m["command"] = nonNil(argv)
	} else {
		m["command"] = nonNil(s.Command)
	}
	if p := s.Checkpoint; p != nil {
		c := map[string]any{
			"servers": nonNil(p.Servers), "min_servers": p.MinServers, "restore": string(p.Mode()),
			"restore_timeout_s": int64(p.RestoreTimeout / time.Second),
		}
		if len(p.Keys) > 0 {
			c["keys"] = p.Keys
		}
		m["checkpoint"] = c
	}
	return m
}

// epoch is an epoch as read: nil when the event carried none (a Paygress
// event: the epoch is unknown).
func epoch(e uint64, has bool) any {
	if !has {
		return nil
	}
	return e
}

func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
