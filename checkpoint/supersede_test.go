package checkpoint_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"provideragent/checkpoint"
	"provideragent/uploader"
)

// TestSupersededBlobsDeleted (BUD-12 against dev-blossom): once a
// checkpoint is acknowledged, the blobs of those it superseded are
// deleted from the server, except what a restore may still need: the
// newest two checkpoints' blobs, a tile they share with an older one
// (tiles are content-addressed, sealing is deterministic), the checkpoint
// the epoch was restored from, and for a while one a heartbeat named.
func TestSupersededBlobsDeleted(t *testing.T) {
	w := newWorld(t)
	srv := devServer(t)
	p := w.holderPublisher()
	p.Deleter = uploader.Deleter{Keys: w.a}
	clock := waitClock{now: time.Now().Truncate(time.Second)}
	clock.drive(p)
	key := checkpoint.Key(sha256.Sum256([]byte("k")))
	dir := t.TempDir()
	job := checkpoint.PublishJob{Workload: "wl-gc", Epoch: 1, Dir: checkpoint.Dir{Path: dir, UID: -1},
		Servers: []string{srv.URL()}, GrantAt: w.grantAt, Key: &key}
	var pubs []checkpoint.Published
	publish := func(i int) checkpoint.Published {
		t.Helper()
		// The first 16 bytes (one tile) are the same in every checkpoint.
		write(t, dir, fmt.Sprintf("shared 16 bytes!checkpoint %d and its own state", i))
		pub, err := p.Publish(context.Background(), job)
		if err != nil {
			t.Fatalf("Publish #%d = %v", i, err)
		}
		pubs = append(pubs, pub)
		return pub
	}
	shared := func() string { // the sealed first tile, in every checkpoint
		in := map[string]int{}
		for _, pub := range pubs {
			for _, b := range pub.Blobs {
				in[b]++
			}
		}
		for b, n := range in {
			if n == len(pubs) {
				return b
			}
		}
		t.Fatal("no blob shared by every checkpoint")
		return ""
	}
	only := func(pub checkpoint.Published) []string { // blobs of pub no other checkpoint has
		var out []string
		for _, b := range pub.Blobs {
			mine := true
			for _, o := range pubs {
				if o.EventID != pub.EventID {
					for _, ob := range o.Blobs {
						mine = mine && ob != b
					}
				}
			}
			if mine {
				out = append(out, b)
			}
		}
		return out
	}
	allHeld := func(what string, blobs []string, want bool) {
		t.Helper()
		for _, b := range blobs {
			if srv.Has(b) != want {
				t.Errorf("%s: blob %s held = %v, want %v", what, b[:12], !want, want)
			}
		}
	}

	publish(1)
	publish(2)
	if pubs[1].Deleted != 0 {
		t.Errorf("the second publish deleted %d copies, want none (two checkpoints kept)", pubs[1].Deleted)
	}
	third := publish(3)
	if len(only(pubs[0])) == 0 {
		t.Fatal("the first checkpoint has no blob of its own")
	}
	allHeld("the first checkpoint, superseded", only(pubs[0]), false)
	allHeld("the second checkpoint", pubs[1].Blobs, true)
	allHeld("the third checkpoint", pubs[2].Blobs, true)
	allHeld("the tile all share", []string{shared()}, true)
	if third.Deleted != len(only(pubs[0])) || third.DeleteFailed != 0 {
		t.Errorf("the third publish deleted %d copies (%d failed), want the first's own %d", third.Deleted, third.DeleteFailed, len(only(pubs[0])))
	}

	// The epoch stands on the second checkpoint (as if restored from it):
	// it stays when the fourth supersedes it.
	p.Protect("wl-gc", 1, pubs[1].Blobs)
	publish(4)
	allHeld("the checkpoint the epoch was restored from", pubs[1].Blobs, true)
	allHeld("the third checkpoint", pubs[2].Blobs, true)
	allHeld("the fourth checkpoint", pubs[3].Blobs, true)
	publish(5)
	allHeld("the third checkpoint, superseded", only(pubs[2]), false)
	allHeld("the tile all share", []string{shared()}, true)

	// A final checkpoint (a planned move's) deletes nothing: the handover
	// waits for no delete.
	job.Final = true
	write(t, dir, "shared 16 bytes!the final state")
	final, err := p.Publish(context.Background(), job)
	if err != nil || final.Deleted != 0 {
		t.Fatalf("final Publish = %+v, %v; want published, nothing deleted", final, err)
	}
	allHeld("the fourth checkpoint, superseded by a final one", only(pubs[3]), true)

	// A checkpoint a heartbeat named (the evidence a standby's restore
	// never goes behind) keeps its blobs for NamedFor after it was
	// superseded, then goes.
	job.Final = false
	p.NamedFor = 3 * time.Second
	named := publish(7)
	if got, _ := p.Named("wl-gc"); got.EventID != named.EventID {
		t.Fatalf("Named = %s, want the newest checkpoint %s", got.EventID, named.EventID)
	}
	publish(8) // each publish a second later
	publish(9)
	allHeld("the checkpoint a heartbeat named 2 s ago", only(named), true)
	publish(10)
	allHeld("the checkpoint a heartbeat named 3 s ago", only(named), false)
}
