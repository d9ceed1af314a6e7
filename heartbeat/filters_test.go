package heartbeat

import (
	"testing"
	"time"

	"provideragent/lease"
)

func TestFiltersMatchOurEvents(t *testing.T) {
	p, s1, issuer, stranger := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "issuer"), testKeys(t, "stranger")
	fs := Filters(FilterParams{
		Self: s1.PublicKey(), Providers: []string{p.PublicKey(), s1.PublicKey()}, Workloads: []string{"wl-1"},
		Issuers: []string{issuer.PublicKey()}, Since: t0.Add(-time.Hour), HeartbeatWindow: 3 * time.Minute, Now: t0,
	})
	hb, _ := BuildHeartbeat(p, HeartbeatParams{At: t0}, false)
	oldHB, _ := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(-10 * time.Minute)}, true)
	strangerHB, _ := BuildHeartbeat(stranger, HeartbeatParams{At: t0}, true)
	rev, _ := BuildRevocation(p, RevocationParams{WorkloadID: "wl-1", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1})
	claim, _ := BuildPromotion(stranger, PromotionParams{WorkloadID: "wl-1", At: t0, Epoch: 2})
	otherClaim, _ := BuildPromotion(s1, PromotionParams{WorkloadID: "wl-2", At: t0, Epoch: 2})
	grant := func(k *Keys) bool {
		ev, err := BuildLeaseGrant(k, LeaseGrantParams{WorkloadID: "wl-1", Primary: p.PublicKey(), Standbys: []string{s1.PublicKey()},
			Relays: []string{"wss://r"}, Quorum: 1, Replication: "warm-standby", RestartPolicy: leaseNever(), Manifest: "m", At: t0})
		if err != nil {
			t.Fatal(err)
		}
		return fs.Match(ev)
	}
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"heartbeat", fs.Match(hb), true},
		{"heartbeat older than the window", fs.Match(oldHB), false},
		{"stranger heartbeat", fs.Match(strangerHB), false},
		{"revocation", fs.Match(rev), true},
		{"claim of a tracked workload (signer checked at ingest)", fs.Match(claim), true},
		{"claim of another workload", fs.Match(otherClaim), false},
		{"grant by issuer", grant(issuer), true},
		{"grant by stranger", grant(stranger), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("Filters().Match(%s) = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got := Filters(FilterParams{}); len(got) != 0 {
		t.Errorf("Filters(empty) = %v, want none", got)
	}
}

func leaseNever() lease.RestartPolicy { return lease.RestartPolicy{Policy: lease.RestartNever} }
