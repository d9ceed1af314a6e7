package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/checkpoint"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/logcapture"
	"provideragent/internal/relaytest"
	"provideragent/lease"
	"provideragent/relay"
	"provideragent/uploader"
)

// poolQuerier is the agent's RelayPool.Query over relay.Pool: every
// relay's events, and how many answered completely.
type poolQuerier struct{ p *relay.Pool }

func (q poolQuerier) Query(ctx context.Context, f nostr.Filter) ([]relay.Received, int) {
	var out []relay.Received
	n := 0
	for _, r := range q.p.Query(ctx, f) {
		if r.Complete() {
			n++
		}
		for i := range r.Events {
			out = append(out, relay.Received{Relay: r.Relay, Event: &r.Events[i]})
		}
	}
	return out, n
}

// members is the Ingestor's signer policy: the lease's members.
type members map[string]bool

func (m members) CurrentPrimary(string) (string, bool) { return "", false }
func (m members) IsMember(_, pk string) bool           { return m[pk] }
func (m members) AllowedIssuer(string) bool            { return false }

type world struct {
	t    *testing.T
	pool *relay.Pool
	// a held epoch 1, c is a member that never held an epoch before the
	// restore, b restores (self), x is no member.
	a, b, c, x *identity.Keys
	aSecret    string // a's secret key (its Blossom uploads)
	grantAt    time.Time
	claimAt    time.Time // epoch 2 began (b's claim won)
	ingest     *heartbeat.Ingestor
}

func newKeys(t *testing.T) *identity.Keys {
	t.Helper()
	k, err := identity.NewKeys(nostr.GeneratePrivateKey())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newWorld(t *testing.T) *world {
	t.Helper()
	// One relay of each implementation CI runs: khatru, the strfry
	// emulation (which refuses a #workload filter) and @nostr-relay/core.
	var relays []*relaytest.Relay
	for _, k := range []relaytest.Kind{relaytest.Khatru, relaytest.StrfryEmulated, relaytest.NostrRelay} {
		relays = append(relays, relaytest.StartKind(t, k, relaytest.KindOptions{}))
	}
	var urls []string
	for _, r := range relays {
		urls = append(urls, r.URL())
	}
	cfg := relay.DefaultConfig()
	cfg.URLs = urls
	cfg.BackoffInitial = 20 * time.Millisecond
	pool, err := relay.New(cfg, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	w := &world{t: t, pool: pool, aSecret: nostr.GeneratePrivateKey(), b: newKeys(t), c: newKeys(t), x: newKeys(t)}
	if w.a, err = identity.NewKeys(w.aSecret); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	w.grantAt = now.Add(-10 * time.Minute).Truncate(time.Second)
	w.claimAt = now.Add(-time.Minute)
	w.ingest, err = heartbeat.NewIngestor(heartbeat.DefaultConfig(), members{w.a.PublicKey(): true, w.b.PublicKey(): true, w.c.PublicKey(): true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// blobs is a dev-blossom server's blob directory, filled before it
// starts (tests then damage files in it).
type blobs struct {
	dir string
	url string
}

// put tiles data (8-byte tiles) into dir as blobs and returns the
// manifest's sha256 and size and the file's manifest.
func (b *blobs) put(t *testing.T, workload string, data []byte) (string, int64, uploader.Manifest) {
	t.Helper()
	m, err := uploader.Split(bytes.NewReader(data), workload, 8, func(content []byte, sha string) error {
		return os.WriteFile(filepath.Join(b.dir, sha), content, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(mb)
	sha := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(b.dir, sha), mb, 0o600); err != nil {
		t.Fatal(err)
	}
	return sha, int64(len(mb)), m
}

func (b *blobs) start(t *testing.T) {
	t.Helper()
	b.url = devblossomtest.Start(t, devblossom.Options{Dir: b.dir}).URL()
}

// record publishes a checkpoint record signed by k on every relay.
func (w *world) record(k *identity.Keys, r heartbeat.CheckpointRecord, at time.Time) *nostr.Event {
	w.t.Helper()
	ev, err := heartbeat.BuildCheckpointRecord(k, r, at)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res := w.pool.Publish(ctx, *ev); len(res.Accepted) != 3 {
		w.t.Fatalf("publish record: accepted by %v, want all 3 relays (%+v)", res.Accepted, res)
	}
	return ev
}

// ckpt is a record of the checkpoint data placed as manifest sha/size.
func ckpt(workload string, epoch, seq uint64, sha string, size int64, m uploader.Manifest, server string, grantAt, takenAt time.Time) heartbeat.CheckpointRecord {
	return heartbeat.CheckpointRecord{
		WorkloadID: workload, Epoch: epoch, Seq: seq, Manifest: sha, ManifestSize: size,
		Size: m.Size, SHA256: m.SHA256, TakenAt: takenAt, Servers: []string{server},
		StateURI: uploader.BlossomURI(sha, "json", []string{server}, "", size), GrantAt: grantAt,
	}
}

func (w *world) restorer() *checkpoint.Restorer {
	return &checkpoint.Restorer{
		Relays: poolQuerier{w.pool}, Verify: w.ingest, Blobs: checkpoint.HTTPBlobs{},
		Self: w.b.PublicKey(), MaxSkew: 5 * time.Second, Quorum: 3, QueryTimeout: 10 * time.Second,
		Retry: 100 * time.Millisecond,
	}
}

// request is b's restore of workload into a new checkpoint directory
// owned by uid:gid 4242:4243, for the epoch after those of holders (by
// default a held epoch 1).
func (w *world) request(workload string, holders ...lease.EpochHolder) checkpoint.RestoreRequest {
	dir := filepath.Join(w.t.TempDir(), "ckpt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		w.t.Fatal(err)
	}
	if len(holders) == 0 {
		holders = []lease.EpochHolder{{Epoch: 1, Holder: w.a.PublicKey(), From: w.grantAt}}
	}
	epoch := uint64(0)
	for _, h := range holders {
		epoch = max(epoch, h.Epoch+1)
	}
	holders = append(holders, lease.EpochHolder{Epoch: epoch, Holder: w.b.PublicKey(), From: w.claimAt})
	return checkpoint.RestoreRequest{
		RestoreCheckpoint: lease.RestoreCheckpoint{ID: workload, Epoch: epoch, Attempt: 1, Mode: lease.RestoreRequired,
			Timeout: 10 * time.Second, Holders: holders, GrantAt: w.grantAt},
		Members: []string{w.a.PublicKey(), w.b.PublicKey(), w.c.PublicKey(), w.x.PublicKey()},
		Dir:     checkpoint.Dir{Path: dir, UID: 4242, GID: 4243},
	}
}

func restore(t *testing.T, r *checkpoint.Restorer, req checkpoint.RestoreRequest) checkpoint.RestoreOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := r.Restore(ctx, req)
	t.Logf("outcome: %+v", out.Result)
	for _, f := range out.Refused {
		t.Logf("refused %s: %s: %s", f.EventID, f.Reason, f.Detail)
	}
	return out
}

// placed checks the restored checkpoint: want's bytes, owned by the
// request's uid and gid, mode 0600, alone in the directory.
func placed(t *testing.T, req checkpoint.RestoreRequest, want []byte) {
	t.Helper()
	path := filepath.Join(req.Dir.Path, checkpoint.FileName)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("restored checkpoint = %q (%v), want %q", got, err, want)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || int(st.Uid) != req.Dir.UID || int(st.Gid) != req.Dir.GID || st.Mode&0o777 != 0o600 {
		t.Errorf("%s: uid %d gid %d mode %o (%v), want %d:%d 0600", path, st.Uid, st.Gid, st.Mode&0o777, err, req.Dir.UID, req.Dir.GID)
	}
	onlyEntries(t, req.Dir.Path, checkpoint.FileName)
}

// onlyEntries checks that dir holds exactly names (no temporary files).
func onlyEntries(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

func refusedFor(out checkpoint.RestoreOutcome, id, reason string) bool {
	for _, f := range out.Refused {
		if f.EventID == id && f.Reason == reason {
			return true
		}
	}
	return false
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("placing a checkpoint owned by the workload's user needs root")
	}
}

// TestRestorePlacesTheNewestUsableCheckpoint: b, whose claim for epoch 3
// won, restores over three real relays and a dev-blossom server. The
// holder of epoch 2 published seq 7 whose tile the server now serves
// truncated: refused (truncated_tile), and b falls back to epoch 1's
// checkpoint, written owned by the workload's user, mode 0600.
func TestRestorePlacesTheNewestUsableCheckpoint(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	b := &blobs{dir: t.TempDir()}
	old, newer := []byte("counter=4100 and some more state"), []byte("counter=4200 and some more state!")
	sha1, size1, m1 := b.put(t, "wl-newest", old)
	sha2, size2, m2 := b.put(t, "wl-newest", newer)
	if err := os.Truncate(filepath.Join(b.dir, m2.Tiles[1].SHA256), 3); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	ev1 := w.record(w.a, ckpt("wl-newest", 1, 41, sha1, size1, m1, b.url, w.grantAt, w.grantAt.Add(time.Minute)), w.grantAt.Add(time.Minute))
	ev2 := w.record(w.c, ckpt("wl-newest", 2, 7, sha2, size2, m2, b.url, w.grantAt, w.claimAt.Add(-2*time.Minute)), w.claimAt.Add(-2*time.Minute))
	req := w.request("wl-newest", lease.EpochHolder{Epoch: 1, Holder: w.a.PublicKey(), From: w.grantAt},
		lease.EpochHolder{Epoch: 2, Holder: w.c.PublicKey(), From: w.claimAt.Add(-5 * time.Minute)})
	out := restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record == nil || out.Record.EventID != ev1.ID {
		t.Fatalf("Restore = %+v, record %v; want epoch 1's record %s restored", out.Result, out.Record, ev1.ID)
	}
	if !refusedFor(out, ev2.ID, checkpoint.RefuseTruncatedTile) {
		t.Errorf("epoch 2's record with a truncated tile was not refused as truncated_tile: %+v", out.Refused)
	}
	if !strings.Contains(out.Result.From, "epoch 1 seq 41") || !strings.Contains(out.Result.From, "truncated_tile") {
		t.Errorf("From = %q, want it to name epoch 1 seq 41 and the skipped truncated record", out.Result.From)
	}
	placed(t, req, old)
	if info, err := checkpoint.Stat(req.Dir.Path); err != nil || info.ID != out.Placed {
		t.Errorf("Placed = %v, the file is %v (%v)", out.Placed, info.ID, err)
	}
}

// TestRestoreRefuses: one case per refusal of a forged or stale record.
// Each record is refused with its reason and nothing
// is placed: the attempt fails, naming the refusal; a record of another
// grant is refused but does not fail it (the lease starts fresh: nothing
// was published for its grant).
func TestRestoreRefuses(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	type setup struct {
		w                *world
		id, server, sha  string
		size             int64
		m                uploader.Manifest
		blobDir          string
		good             heartbeat.CheckpointRecord // a's checkpoint of epoch 1
		goodAt           time.Time
		afterSuccessorAt time.Time
	}
	for _, tt := range []struct {
		name   string
		damage func(s *setup)              // before the server starts
		record func(s *setup) *nostr.Event // what is published
		want   string                      // the refusal
	}{
		{"wrong_signer: a member that never held epoch 1", nil, func(s *setup) *nostr.Event {
			return s.w.record(s.w.c, s.good, s.goodAt)
		}, lease.RefuseWrongSigner},
		{"wrong_signer: not a member of the lease", nil, func(s *setup) *nostr.Event {
			return s.w.record(s.w.x, s.good, s.goodAt)
		}, string(heartbeat.ReasonWrongSigner)},
		{"later_epoch: the epoch being restored, by another member", nil, func(s *setup) *nostr.Event {
			r := s.good
			r.Epoch = 2
			return s.w.record(s.w.a, r, s.goodAt)
		}, lease.RefuseLaterEpoch},
		{"later_epoch: the next epoch", nil, func(s *setup) *nostr.Event {
			r := s.good
			r.Epoch = 3
			return s.w.record(s.w.c, r, s.goodAt)
		}, lease.RefuseLaterEpoch},
		{"after_successor_start: epoch 1's holder, after epoch 2 began", nil, func(s *setup) *nostr.Event {
			r := s.good
			r.TakenAt = s.afterSuccessorAt
			return s.w.record(s.w.a, r, s.afterSuccessorAt)
		}, lease.RefuseAfterSuccessorStart},
		{"other_grant: a record of an earlier grant of the workload", nil, func(s *setup) *nostr.Event {
			r := s.good
			r.GrantAt = s.w.grantAt.Add(-time.Hour)
			return s.w.record(s.w.a, r, s.goodAt)
		}, lease.RefuseOtherGrant},
		{"hash_mismatch: a tile rewritten on the server", func(s *setup) {
			p := filepath.Join(s.blobDir, s.m.Tiles[0].SHA256)
			data, _ := os.ReadFile(p)
			data[0] ^= 0xff
			_ = os.WriteFile(p, data, 0o600)
		}, func(s *setup) *nostr.Event { return s.w.record(s.w.a, s.good, s.goodAt) }, checkpoint.RefuseHashMismatch},
		{"hash_mismatch: the manifest rewritten on the server", func(s *setup) {
			p := filepath.Join(s.blobDir, s.sha)
			data, _ := os.ReadFile(p)
			_ = os.WriteFile(p, bytes.Replace(data, []byte(`"version":1`), []byte(`"version":2`), 1), 0o600)
		}, func(s *setup) *nostr.Event { return s.w.record(s.w.a, s.good, s.goodAt) }, checkpoint.RefuseHashMismatch},
		{"truncated_tile: a tile cut short on the server", func(s *setup) {
			_ = os.Truncate(filepath.Join(s.blobDir, s.m.Tiles[2].SHA256), 5)
		}, func(s *setup) *nostr.Event { return s.w.record(s.w.a, s.good, s.goodAt) }, checkpoint.RefuseTruncatedTile},
		{"hash_mismatch: a record whose file hash is not the manifest's", nil, func(s *setup) *nostr.Event {
			r := s.good
			r.SHA256 = strings.Repeat("ab", 32)
			return s.w.record(s.w.a, r, s.goodAt)
		}, checkpoint.RefuseHashMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := "wl-" + strings.NewReplacer(" ", "-", ":", "", "'", "").Replace(tt.name)
			if len(id) > 64 {
				id = id[:64]
			}
			b := &blobs{dir: t.TempDir()}
			s := &setup{w: w, id: id, blobDir: b.dir}
			data := []byte("the state of " + id + ": 31337 and more")
			s.sha, s.size, s.m = b.put(t, id, data)
			if tt.damage != nil {
				tt.damage(s)
			}
			b.start(t)
			s.server = b.url
			s.goodAt = w.grantAt.Add(2 * time.Minute)
			s.afterSuccessorAt = w.claimAt.Add(20 * time.Second)
			s.good = ckpt(id, 1, 5, s.sha, s.size, s.m, b.url, w.grantAt, s.goodAt)
			ev := tt.record(s)
			req := w.request(id)
			out := restore(t, w.restorer(), req)
			fresh := tt.want == lease.RefuseOtherGrant // nothing of this grant
			if out.Result.OK || out.Result.Fresh != fresh {
				t.Fatalf("Restore = %+v, want a failure (fresh %v)", out.Result, fresh)
			}
			if !refusedFor(out, ev.ID, tt.want) {
				t.Errorf("record %s not refused as %s: %+v", ev.ID, tt.want, out.Refused)
			}
			if !strings.Contains(out.Result.Reason, tt.want) {
				t.Errorf("Reason = %q, want it to name %s", out.Result.Reason, tt.want)
			}
			onlyEntries(t, req.Dir.Path)
		})
	}
}

// TestRestoreFreshWhenNothingWasPublished: no record of the workload on
// any relay and no hint: Fresh, in any mode, and nothing placed.
func TestRestoreFreshWhenNothingWasPublished(t *testing.T) {
	w := newWorld(t)
	req := w.request("wl-never")
	out := restore(t, w.restorer(), req)
	if !out.Result.Fresh || out.Result.OK || out.Result.Reason != "no checkpoint was ever published" {
		t.Fatalf("Restore = %+v, want Fresh: no checkpoint was ever published", out.Result)
	}
	onlyEntries(t, req.Dir.Path)
}

// TestRestorePrefersTheHint: the revocation's state_uri names a newer
// checkpoint than any usable record (its record never reached these
// relays): b restores the hint, which its author, epoch 1's holder, made.
// A hint by anyone else is refused.
func TestRestorePrefersTheHint(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	b := &blobs{dir: t.TempDir()}
	old, final := []byte("counter=10 ........"), []byte("counter=11 (final) ........")
	sha1, size1, m1 := b.put(t, "wl-hint", old)
	sha2, size2, _ := b.put(t, "wl-hint", final)
	b.start(t)
	w.record(w.a, ckpt("wl-hint", 1, 1, sha1, size1, m1, b.url, w.grantAt, w.grantAt.Add(time.Minute)), w.grantAt.Add(time.Minute))

	req := w.request("wl-hint")
	req.Hint = uploader.BlossomURI(sha2, "json", []string{b.url}, w.a.PublicKey(), size2)
	out := restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record != nil || out.StateURI != req.Hint {
		t.Fatalf("Restore = %+v (record %v, state %q), want the hint restored", out.Result, out.Record, out.StateURI)
	}
	placed(t, req, final)

	req = w.request("wl-hint")
	req.Hint = uploader.BlossomURI(sha2, "json", []string{b.url}, w.c.PublicKey(), size2)
	out = restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record == nil || out.Record.Seq != 1 || !refusedFor(out, "hint", checkpoint.RefuseBadHint) {
		t.Fatalf("Restore with a hint by a non-holder = %+v (record %v, refused %+v), want the hint refused and the record restored", out.Result, out.Record, out.Refused)
	}
	placed(t, req, old)
}

// TestRestoreNeedsQuorumOfRelays: with fewer relays answering than the
// quorum, an attempt fails (retrying until its context ends) instead of
// calling the workload fresh. The pool connects to all three relays
// first: under CI's race run, with the attempt begun at once, one relay
// had answered within its 500 ms (2026-11-29), and the reason named one.
func TestRestoreNeedsQuorumOfRelays(t *testing.T) {
	w := newWorld(t)
	r := w.restorer()
	r.Quorum = 4
	// One try within the attempt (a try the attempt's deadline cut short
	// counted fewer answers than the relays gave, and was reported, in 3
	// of 40 runs under -race and load; the reason is now the last whole
	// try's: TestRestoreReasonIsTheLastWholeTry).
	r.Retry = time.Hour
	req := w.request("wl-quorum")
	for deadline := time.Now().Add(30 * time.Second); w.pool.Connected() < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 relays connected after 30 s", w.pool.Connected())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := r.Restore(ctx, req)
	if out.Result.OK || out.Result.Fresh || !strings.Contains(out.Result.Reason, "3 relays answered, 4 needed: unavailable (after 1 tries") {
		t.Fatalf("Restore = %+v, want a failure: too few relays answered", out.Result)
	}
}

// TestRestoreHintWithoutQuorumOfRelays: when too few relays answer the
// records query, the revocation's state_uri by epoch 1's holder is still
// restored (a planned move's successor under relay load kept its final
// state: the fleet's drain at 48 providers lost two counters' state
// without it, 2026-11-29); a hint by anyone else is not, and the attempt
// fails as without a hint.
func TestRestoreHintWithoutQuorumOfRelays(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	b := &blobs{dir: t.TempDir()}
	final := []byte("counter=11 (final) ........")
	sha, size, _ := b.put(t, "wl-hint-q", final)
	b.start(t)
	r := w.restorer()
	r.Quorum = 4

	req := w.request("wl-hint-q")
	req.Hint = uploader.BlossomURI(sha, "json", []string{b.url}, w.a.PublicKey(), size)
	out := restore(t, r, req)
	if !out.Result.OK || out.Record != nil || out.StateURI != req.Hint ||
		!strings.Contains(out.Result.From, "without its record (query checkpoint records:") {
		t.Fatalf("Restore = %+v (record %v, state %q), want the hint restored without its record", out.Result, out.Record, out.StateURI)
	}
	placed(t, req, final)

	r.Retry = time.Hour // one try: the reason is that try's
	req = w.request("wl-hint-q")
	req.Hint = uploader.BlossomURI(sha, "json", []string{b.url}, w.c.PublicKey(), size)
	out = restore(t, r, req)
	if out.Result.OK || out.Result.Fresh || !strings.Contains(out.Result.Reason, "relays answered, 4 needed: unavailable; the revocation's state_uri refused: no usable record") ||
		!refusedFor(out, "hint", checkpoint.RefuseBadHint) {
		t.Fatalf("Restore with a hint by a non-holder = %+v (refused %+v), want a failure: too few relays, the hint refused", out.Result, out.Refused)
	}
	onlyEntries(t, req.Dir.Path)
}

// TestRestoreSeed: a grant's state_uri (a re-grant naming the state to
// start from) is restored when no record of the grant exists; a record,
// once there, wins over it.
func TestRestoreSeed(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	b := &blobs{dir: t.TempDir()}
	seed, later := []byte("state handed over by the issuer"), []byte("state the holder of epoch 1 made")
	seedSHA, seedSize, _ := b.put(t, "wl-seed", seed)
	sha, size, m := b.put(t, "wl-seed", later)
	b.start(t)
	req := w.request("wl-seed")
	req.Seed = uploader.BlossomURI(seedSHA, "json", []string{b.url}, "", seedSize)
	out := restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record != nil || !strings.Contains(out.Result.From, "grant's state_uri") {
		t.Fatalf("Restore with only a seed = %+v, want the seed restored", out.Result)
	}
	placed(t, req, seed)

	w.record(w.a, ckpt("wl-seed", 1, 1, sha, size, m, b.url, w.grantAt, w.grantAt.Add(time.Minute)), w.grantAt.Add(time.Minute))
	req2 := w.request("wl-seed")
	req2.Seed = req.Seed
	out = restore(t, w.restorer(), req2)
	if !out.Result.OK || out.Record == nil {
		t.Fatalf("Restore with a record and a seed = %+v, want the record restored", out.Result)
	}
	placed(t, req2, later)
}

// TestRestoreFollowsTheEvidence: the relays lost the holder's newest
// record (only an older one survives), but its heartbeats named that
// checkpoint (req.Evidence): a required restore refuses the older record
// as behind_evidence and places the named one, fetched by its manifest's
// hash from the lease's servers; with the named blobs gone from the
// servers too it fails rather than go back, and a best-effort restore
// falls back to the older record.
func TestRestoreFollowsTheEvidence(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	b := &blobs{dir: t.TempDir()}
	old, newest := []byte("counter=100 ........"), []byte("counter=250 (newest) ........")
	sha1, size1, m1 := b.put(t, "wl-ev", old)
	sha2, _, m2 := b.put(t, "wl-ev", newest)
	b.start(t)
	ev1 := w.record(w.a, ckpt("wl-ev", 1, 4, sha1, size1, m1, b.url, w.grantAt, w.grantAt.Add(time.Minute)), w.grantAt.Add(time.Minute))
	req := w.request("wl-ev")
	req.Servers = []string{b.url}
	req.Evidence = lease.CheckpointEvidence{Epoch: 1, Seq: 9, Manifest: sha2}
	out := restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record != nil || !strings.Contains(out.Result.From, "named by its holder's heartbeats") {
		t.Fatalf("Restore = %+v (record %v), want the checkpoint the evidence names", out.Result, out.Record)
	}
	if !refusedFor(out, ev1.ID, lease.RefuseBehindEvidence) {
		t.Errorf("the older record was not refused as behind_evidence: %+v", out.Refused)
	}
	placed(t, req, newest)

	inOld := map[string]bool{}
	for _, tl := range m1.Tiles {
		inOld[tl.SHA256] = true
	}
	for _, tl := range m2.Tiles {
		if !inOld[tl.SHA256] { // (tiles are shared by content)
			if err := os.Remove(filepath.Join(b.dir, tl.SHA256)); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	req = w.request("wl-ev")
	req.Servers = []string{b.url}
	req.Evidence = lease.CheckpointEvidence{Epoch: 1, Seq: 9, Manifest: sha2}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	out = w.restorer().Restore(ctx, req)
	cancel()
	if out.Result.OK || out.Result.Fresh {
		t.Fatalf("required Restore with the named checkpoint gone = %+v, want a failure, not an older one", out.Result)
	}
	req = w.request("wl-ev")
	req.Servers = []string{b.url}
	req.Mode = lease.RestoreBestEffort
	req.Evidence = lease.CheckpointEvidence{Epoch: 1, Seq: 9, Manifest: sha2}
	out = restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record == nil || out.Record.EventID != ev1.ID {
		t.Fatalf("best-effort Restore with the named checkpoint gone = %+v, want the older record", out.Result)
	}
	placed(t, req, old)
}

// TestRestoreReportsEveryBadCopy: of two servers holding a checkpoint,
// the first serves one tile with a byte changed and the manifest cut
// short. The restore takes both from the second and succeeds, and still
// says, once per blob, which server served wrong bytes: a WARN naming
// the server, the blob and the workload, and OnBadCopy (the agent's
// metric).
func TestRestoreReportsEveryBadCopy(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	bad, good := &blobs{dir: t.TempDir()}, &blobs{dir: t.TempDir()}
	data := []byte("counter=7 and the rest of a state that spans several tiles")
	sha, size, m := bad.put(t, "wl-badcopy", data)
	good.put(t, "wl-badcopy", data)
	tile := filepath.Join(bad.dir, m.Tiles[1].SHA256)
	body, _ := os.ReadFile(tile)
	body[0] ^= 0xff
	if err := os.WriteFile(tile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad.dir, sha), []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad.start(t)
	good.start(t)
	rec := ckpt("wl-badcopy", 1, 3, sha, size, m, bad.url, w.grantAt, w.grantAt.Add(time.Minute))
	rec.Servers = []string{bad.url, good.url}
	w.record(w.a, rec, w.grantAt.Add(time.Minute))

	logs := logcapture.New(slog.LevelWarn)
	r := w.restorer()
	r.Logger = slog.New(logs)
	var reported []checkpoint.BadCopy
	r.OnBadCopy = func(b checkpoint.BadCopy) { reported = append(reported, b) }
	req := w.request("wl-badcopy")
	out := restore(t, r, req)
	if !out.Result.OK {
		t.Fatalf("Restore = %+v, want the checkpoint restored from the good server", out.Result)
	}
	placed(t, req, data)
	want := map[string]string{sha: checkpoint.RefuseHashMismatch, m.Tiles[1].SHA256: checkpoint.RefuseHashMismatch}
	if len(reported) != len(want) {
		t.Fatalf("OnBadCopy heard %+v, want the manifest and tile 1 from %s", reported, bad.url)
	}
	for _, b := range reported {
		if b.Workload != "wl-badcopy" || b.Server != bad.url || want[b.Blob] != b.Reason {
			t.Errorf("OnBadCopy(%+v), want workload wl-badcopy, server %s and reason %q", b, bad.url, want[b.Blob])
		}
	}
	lines := logs.Find("checkpoint blob refused: the server served wrong bytes")
	if len(lines) != 2 {
		t.Fatalf("WARN lines %+v, want one per bad copy", logs.Records())
	}
	for _, l := range lines {
		if l.String("workload") != "wl-badcopy" || l.String("server") != bad.url || want[l.String("blob")] == "" {
			t.Errorf("WARN %v, want the workload, the bad server and the blob named", l.Attrs)
		}
	}
}

// cutQuerier answers its first query with answered relays and blocks
// every later one until its context ends, then reports none: a try the
// attempt's deadline cuts short.
type cutQuerier struct {
	answered int
	calls    int
}

func (q *cutQuerier) Query(ctx context.Context, _ nostr.Filter) ([]relay.Received, int) {
	q.calls++
	if q.calls == 1 {
		return nil, q.answered
	}
	<-ctx.Done()
	return nil, 0
}

// TestRestoreReasonIsTheLastWholeTry: when the attempt's deadline cuts a
// try short, the reason is the last try that ran whole ("3 relays
// answered", not the cut try's 0), with the number of tries and the cause.
func TestRestoreReasonIsTheLastWholeTry(t *testing.T) {
	q := &cutQuerier{answered: 3}
	r := &checkpoint.Restorer{Relays: q, Quorum: 4, Retry: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // the second try starts 10 ms after the first, well within
	defer cancel()
	out := r.Restore(ctx, checkpoint.RestoreRequest{RestoreCheckpoint: lease.RestoreCheckpoint{ID: "wl-cut", Epoch: 2, Attempt: 1}, Members: []string{"a"}})
	if q.calls != 2 || out.Result.OK || out.Result.Fresh ||
		!strings.Contains(out.Result.Reason, "3 relays answered, 4 needed: unavailable (after 2 tries: context deadline exceeded)") {
		t.Fatalf("Restore = %+v after %d queries, want the first (whole) try's reason after 2 tries", out.Result, q.calls)
	}
}
