package checkpoint_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/checkpoint"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/devblossom"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
	"provideragent/relay"
	"provideragent/uploader"
)

// memRelays is a lease's relay set in memory: every relay stores every
// event published (the agent gives its relay.Pool instead).
type memRelays struct {
	mu     sync.Mutex
	urls   []string
	events []nostr.Event
}

func (m *memRelays) PublishQuorum(_ context.Context, ev *nostr.Event, _ int) relay.PublishResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, *ev)
	return relay.PublishResult{EventID: ev.ID, Accepted: m.urls}
}

func (m *memRelays) Query(_ context.Context, f nostr.Filter) ([]relay.Received, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []relay.Received
	for _, url := range m.urls {
		for i := range m.events {
			if f.Matches(&m.events[i]) {
				ev := m.events[i]
				out = append(out, relay.Received{Relay: url, Event: &ev})
			}
		}
	}
	return out, len(m.urls)
}

// leaseMembers is the signer policy of one lease: its members may sign its
// checkpoint records.
type leaseMembers map[string]bool

func (m leaseMembers) CurrentPrimary(string) (string, bool) { return "", false }
func (m leaseMembers) IsMember(_, pk string) bool           { return m[pk] }
func (m leaseMembers) AllowedIssuer(string) bool            { return false }

// The holder of a durable workload publishes each checkpoint its workload
// writes (tiles and manifest on K Blossom servers, then a signed record on
// M relays); the provider that takes over restores the newest one into
// its run's directory before it starts the workload.
func ExamplePublisher() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp, _ := os.MkdirTemp("", "ckpt-")
	defer os.RemoveAll(tmp)
	const holderSecret = "0000000000000000000000000000000000000000000000000000000000000001"
	holder, _ := identity.NewKeys(holderSecret)
	successor, _ := identity.NewKeys("0000000000000000000000000000000000000000000000000000000000000002")

	blossom, err := devblossom.New(devblossom.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := blossom.Start(ctx, "127.0.0.1:0"); err != nil {
		fmt.Println(err)
		return
	}
	defer blossom.Shutdown(context.Background())
	relays := &memRelays{urls: []string{"wss://r0.example", "wss://r1.example", "wss://r2.example"}}

	// The holder's side.
	db, err := sqlitedb.Open(ctx, filepath.Join(tmp, "tiles.db"), sqlitedb.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	store, err := uploader.NewStore(ctx, db, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	pub := &checkpoint.Publisher{
		Store: store, Relays: relays, Keys: holder, Quorum: 2,
		Uploader: func(servers []string, k int) (uploader.Uploader, error) {
			cfg := uploader.DefaultConfig()
			cfg.Servers, cfg.MinReplicas = servers, k
			return uploader.BuildUploader(cfg, uploader.Deps{Store: store, SecretKey: holderSecret})
		},
		Holds: func(string, uint64) bool { return true }, // the lease machine says so
	}
	grantAt := time.Now().Add(-time.Hour).Truncate(time.Second)
	runDir := filepath.Join(tmp, "run-1")
	_ = os.Mkdir(runDir, 0o700)
	// The workload writes its checkpoint the contract's way.
	_ = os.WriteFile(filepath.Join(runDir, "checkpoint.tmp"), []byte("counter=4200"), 0o600)
	_ = os.Rename(filepath.Join(runDir, "checkpoint.tmp"), filepath.Join(runDir, checkpoint.FileName))
	p, err := pub.Publish(ctx, checkpoint.PublishJob{
		Workload: "counter-1", Epoch: 1, GrantAt: grantAt,
		Dir:     checkpoint.Dir{Path: runDir, UID: -1},
		Servers: []string{blossom.URL()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("published seq", p.Seq, "on", len(p.Servers), "server and", len(p.Relays), "relays")

	// The successor's side, at epoch 2.
	ingest, err := heartbeat.NewIngestor(heartbeat.DefaultConfig(),
		leaseMembers{holder.PublicKey(): true, successor.PublicKey(): true}, nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &checkpoint.Restorer{
		Relays: relays, Verify: ingest, Blobs: checkpoint.HTTPBlobs{},
		Self: successor.PublicKey(), MaxSkew: 5 * time.Second, Quorum: 2, QueryTimeout: 10 * time.Second,
	}
	newRun := filepath.Join(tmp, "run-2")
	_ = os.Mkdir(newRun, 0o700)
	out := r.Restore(ctx, checkpoint.RestoreRequest{
		RestoreCheckpoint: lease.RestoreCheckpoint{
			ID: "counter-1", Epoch: 2, Attempt: 1, Mode: lease.RestoreRequired, Timeout: 10 * time.Second,
			GrantAt: grantAt,
			Holders: []lease.EpochHolder{
				{Epoch: 1, Holder: holder.PublicKey(), From: grantAt},
				{Epoch: 2, Holder: successor.PublicKey(), From: time.Now()},
			},
		},
		Members: []string{holder.PublicKey(), successor.PublicKey()},
		Dir:     checkpoint.Dir{Path: newRun, UID: os.Getuid(), GID: os.Getgid()},
	})
	if !out.Result.OK || out.Record == nil {
		fmt.Printf("restore failed: %+v\n", out.Result)
		return
	}
	state, _ := os.ReadFile(filepath.Join(newRun, checkpoint.FileName))
	fmt.Println("restored seq", out.Record.Seq, "of epoch", out.Record.Epoch)
	fmt.Printf("the new run starts from %q\n", state)
	// Output:
	// published seq 1 on 1 server and 3 relays
	// restored seq 1 of epoch 1
	// the new run starts from "counter=4200"
}

// A workload writes its checkpoint the contract's way (another name, then
// a rename); the agent's Watcher notices the new version and Open reads it
// safely.
func ExampleWatcher() {
	dir, _ := os.MkdirTemp("", "ckpt-")
	defer os.RemoveAll(dir)

	w := checkpoint.NewWatcher(0) // polled by hand here; Run polls every 250 ms
	w.Watch("counter-1", 3, dir, checkpoint.FileID{})

	// The workload's side.
	_ = os.WriteFile(filepath.Join(dir, "checkpoint.tmp"), []byte("n=4200"), 0o600)
	_ = os.Rename(filepath.Join(dir, "checkpoint.tmp"), filepath.Join(dir, checkpoint.FileName))

	w.Poll()
	for _, c := range w.Take() {
		f, err := checkpoint.Open(c.Dir, -1, checkpoint.DefaultMaxBytes)
		if err != nil {
			fmt.Println("refused:", err)
			continue
		}
		state, _ := io.ReadAll(f)
		err = f.Verify() // not written in place meanwhile
		f.Close()
		fmt.Printf("%s epoch %d: %s (verify: %v)\n", c.Workload, c.Epoch, state, err)
	}
	// Output: counter-1 epoch 3: n=4200 (verify: <nil>)
}
