package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestHolderDeletesSupersededBlobs: a durable counter publishing about a
// checkpoint a second on a dev-blossom server: once a newer checkpoint is
// acknowledged, the holder deletes the older ones' blobs (BUD-12). The
// server holds those of the newest two, of those the holder's heartbeats
// named within the last 3 s (two 1 s heartbeat intervals and the 1 s
// relay delay: a standby may hold that mark as its evidence) and of one
// being published: at most 6 checkpoints of a manifest and a tile, not one
// pair per checkpoint ever published.
func TestHolderDeletesSupersededBlobs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	blobs, shared := durableFixtures(t)
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	holder := startAgent(t, agentOpts{name: "holder", lcfg: lcfg, blossom: []string{blobs.URL()}, logger: slog.New(slog.DiscardHandler)})
	spec := soloSpec("gc1", holder.pub)
	spec.Relays, spec.Quorum = lcfg.Relays, lcfg.M
	spec.Command = []string{"sh", "-c", counterScript(filepath.Join(shared, "starts"))}
	spec.Checkpoint = &lease.CheckpointPolicy{}
	spec.Checkpoint.Keys, _ = sealedKey(t, holder, spec)
	holder.a.Track(context.Background(), spec)
	published := func() float64 { return testutil.ToFloat64(holder.a.obs.met.ckptPublished.WithLabelValues("published")) }
	waitFor(t, 30*time.Second, "ten checkpoints published", func() bool { return published() >= 10 })
	deleted := testutil.ToFloat64(holder.a.obs.met.blobDeletes.WithLabelValues("deleted"))
	failed := testutil.ToFloat64(holder.a.obs.met.blobDeletes.WithLabelValues("failed"))
	st := blobs.Stats()
	n := published()
	t.Logf("%v checkpoints published (a manifest and one tile each): %v blob copies deleted, %v failed; the server holds %d blobs",
		n, deleted, failed, st.Blobs)
	if deleted < 2*(n-6) || failed != 0 {
		t.Errorf("deleted %v copies (%v failed) after %v checkpoints, want the blobs of all but the newest six at least", deleted, failed, n)
	}
	if st.Blobs > 12 {
		t.Errorf("the server holds %d blobs, want at most 12", st.Blobs)
	}
}
