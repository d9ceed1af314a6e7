package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"provideragent/checkpoint"
	"provideragent/internal/devblossom"
	"provideragent/lease"
	"provideragent/uploader"
)

// TestGrantKeyOpensForMembersOnly: the checkpoint key a grant's issuer
// seals to the members opens for each member, the same key, and for no
// one else; a member opens it only knowing the issuer.
func TestGrantKeyOpensForMembersOnly(t *testing.T) {
	issuer, a, b, stranger := newKeys(t), newKeys(t), newKeys(t), newKeys(t)
	keys, err := checkpoint.NewGrantKey(issuer, checkpoint.GrantMembers(a.PublicKey(), []string{b.PublicKey(), a.PublicKey()}))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("sealed to %d members, want 2 (the primary listed once)", len(keys))
	}
	ka, errA := checkpoint.OpenGrantKey(a, keys, []string{stranger.PublicKey(), issuer.PublicKey()})
	kb, errB := checkpoint.OpenGrantKey(b, keys, []string{issuer.PublicKey()})
	if errA != nil || errB != nil || ka != kb || ka == (checkpoint.Key{}) {
		t.Fatalf("members opened %x (%v) and %x (%v), want the same key", ka[:4], errA, kb[:4], errB)
	}
	if _, err := checkpoint.OpenGrantKey(stranger, keys, []string{issuer.PublicKey()}); err == nil || !strings.Contains(err.Error(), "not to this provider") {
		t.Errorf("a non-member opened the key: %v", err)
	}
	// A non-member with a member's payload: NIP-44 between the issuer and
	// that member, which the stranger cannot compute.
	stolen := map[string]string{stranger.PublicKey(): keys[a.PublicKey()]}
	if _, err := checkpoint.OpenGrantKey(stranger, stolen, []string{issuer.PublicKey(), a.PublicKey()}); err == nil {
		t.Errorf("a non-member opened a member's payload")
	}
	if _, err := checkpoint.OpenGrantKey(a, keys, []string{stranger.PublicKey()}); err == nil || !strings.Contains(err.Error(), "none of the 1 issuers") {
		t.Errorf("opened without the issuer: %v", err)
	}
	again, _ := checkpoint.NewGrantKey(issuer, []string{a.PublicKey()})
	if k2, _ := checkpoint.OpenGrantKey(a, again, []string{issuer.PublicKey()}); k2 == ka {
		t.Errorf("two grants got the same checkpoint key")
	}
}

// sealedState is a checkpoint whose every 8 bytes are easy to find in a
// blob that carried them in plaintext.
var sealedState = []byte(strings.Repeat("tenant-secret: counter=4242424242; ", 6))

// TestSealedCheckpointReadByMembersOnly: a checkpoint published with the
// grant's key is on the server only as sealed blobs. A non-member who
// lists and fetches every blob the holder stored (BUD-12 list, then GET)
// finds no 8 bytes of the state in any of them and no manifest it can
// parse; the record on the relays names no hash of the file. A member
// restores it; a restorer with another key refuses it as undecryptable.
func TestSealedCheckpointReadByMembersOnly(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	srv := devServer(t)
	key := checkpoint.Key(sha256.Sum256([]byte("the grant's key")))
	pub := w.publishSealed(srv, "wl-sealed", string(sealedState), key)
	if pub.Size != int64(len(sealedState)) {
		t.Errorf("Published.Size = %d, want the file's %d", pub.Size, len(sealedState))
	}

	// What anyone can fetch from the server.
	resp, err := http.Get(srv.URL() + "/list/" + w.a.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	var listed []struct {
		SHA256 string `json:"sha256"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(listed) != len(pub.Blobs) {
		t.Fatalf("the server lists %d blobs of the holder, the checkpoint has %d", len(listed), len(pub.Blobs))
	}
	for _, d := range listed {
		body := get(t, srv.URL()+"/"+d.SHA256)
		for i := 0; i+8 <= len(sealedState); i++ {
			if bytes.Contains(body, sealedState[i:i+8]) {
				t.Fatalf("blob %s carries %q of the state", d.SHA256[:12], sealedState[i:i+8])
			}
		}
		if json.Valid(body) {
			t.Errorf("blob %s is JSON: %.60q", d.SHA256[:12], body)
		}
		if _, err := uploader.ParseManifest(body); err == nil {
			t.Errorf("blob %s parses as a manifest", d.SHA256[:12])
		}
	}
	for _, r := range w.records("wl-sealed", 1) {
		sum := sha256.Sum256(sealedState)
		if r.SHA256 == hex.EncodeToString(sum[:]) || r.Size == int64(len(sealedState)) {
			t.Errorf("the record names the file (sha256 %s, size %d): anyone could confirm a guess of the state", r.SHA256, r.Size)
		}
	}

	// b, a member, restores it; a restorer with another key cannot.
	w.claimAt = time.Now()
	req := w.request("wl-sealed")
	req.Key = &key
	out := restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record == nil || out.Record.EventID != pub.EventID {
		t.Fatalf("Restore with the grant's key = %+v, want the sealed checkpoint", out.Result)
	}
	placed(t, req, sealedState)

	other := checkpoint.Key(sha256.Sum256([]byte("another grant's key")))
	req = w.request("wl-sealed")
	req.Key = &other
	out = restore(t, w.restorer(), req)
	if out.Result.OK || !refusedFor(out, pub.EventID, checkpoint.RefuseUndecryptable) || !strings.Contains(out.Result.Reason, "does not open with the grant's checkpoint key") {
		t.Fatalf("Restore with another key = %+v (refused %+v), want the record refused as undecryptable, saying so", out.Result, out.Refused)
	}
	onlyEntries(t, req.Dir.Path)
}

// TestRestoreAfterKeyRotation: a re-grant makes a new checkpoint key.
// The records of the earlier grant are refused as other_grant (as they
// were before checkpoints were sealed: a re-grant's epochs start again),
// and the restore says why the workload starts from nothing. A re-grant
// that names the earlier grant's last checkpoint as its state_uri fails,
// saying that checkpoint does not open with the new grant's key; one that
// names a plaintext checkpoint its issuer stored restores it.
func TestRestoreAfterKeyRotation(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	srv := devServer(t)
	oldKey := checkpoint.Key(sha256.Sum256([]byte("the first grant's key")))
	newKey := checkpoint.Key(sha256.Sum256([]byte("the re-grant's key")))
	pub := w.publishSealed(srv, "wl-rotate", "state under the first grant", oldKey)
	regrantAt := w.grantAt.Add(5 * time.Minute)
	rotated := func() checkpoint.RestoreRequest {
		req := w.request("wl-rotate")
		req.GrantAt, req.Key, req.Mode = regrantAt, &newKey, lease.RestoreRequired
		return req
	}

	req := rotated()
	out := restore(t, w.restorer(), req)
	if !out.Result.Fresh || !refusedFor(out, pub.EventID, lease.RefuseOtherGrant) || !strings.Contains(out.Result.Reason, "earlier grant") {
		t.Fatalf("Restore after a re-grant = %+v, want fresh, the earlier grant's record refused as other_grant and the reason saying so", out.Result)
	}

	req = rotated()
	req.Seed = pub.StateURI
	out = restore(t, w.restorer(), req)
	if out.Result.OK || out.Result.Fresh || !refusedFor(out, "seed", checkpoint.RefuseUndecryptable) ||
		!strings.Contains(out.Result.Reason, "does not open with the grant's checkpoint key") {
		t.Fatalf("Restore of the earlier grant's checkpoint under the new key = %+v (refused %+v), want it refused as undecryptable, saying so", out.Result, out.Refused)
	}
	onlyEntries(t, req.Dir.Path)

	b := &blobs{dir: t.TempDir()}
	seedSHA, seedSize, _ := b.put(t, "wl-rotate", []byte("state the issuer handed over in plaintext"))
	b.start(t)
	req = rotated()
	req.Seed = uploader.BlossomURI(seedSHA, "json", []string{b.url}, "", seedSize)
	out = restore(t, w.restorer(), req)
	if !out.Result.OK {
		t.Fatalf("Restore of a plaintext seed under a keyed grant = %+v, want it restored", out.Result)
	}
	placed(t, req, []byte("state the issuer handed over in plaintext"))
}

// publishSealed publishes content as a's checkpoint of workload at epoch
// 1 on srv, sealed with key.
func (w *world) publishSealed(srv *devblossom.Server, workload, content string, key checkpoint.Key) checkpoint.Published {
	w.t.Helper()
	dir := w.t.TempDir()
	write(w.t, dir, content)
	pub, err := w.holderPublisher().Publish(context.Background(), checkpoint.PublishJob{Workload: workload, Epoch: 1,
		Dir: checkpoint.Dir{Path: dir, UID: -1}, Servers: []string{srv.URL()}, GrantAt: w.grantAt, Key: &key})
	if err != nil {
		w.t.Fatal(err)
	}
	return pub
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}
