package uploader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"provideragent/uploader"
)

func writeJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

func TestStoreResetGiveup(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	tiles := addTiles(t, s, "w", 2, 8)
	id := tiles[0].ID
	if err := s.Reset(ctx, id, "x"); !errors.Is(err, uploader.ErrNotGivenUp) {
		t.Errorf("Reset(pending tile) = %v, want ErrNotGivenUp", err)
	}
	if err := s.Reset(ctx, 12345, "x"); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("Reset(missing) = %v, want ErrNotFound", err)
	}
	if gave, err := s.GiveUp(ctx, id, 5, "bad"); !gave || err != nil {
		t.Fatalf("GiveUp = %v, %v, want true, nil", gave, err)
	}
	if gave, err := s.GiveUp(ctx, id, 5, "bad"); gave || err != nil {
		t.Errorf("GiveUp(again) = %v, %v, want false, nil (audited once)", gave, err)
	}
	if err := s.Reset(ctx, id, "fixed the tile source"); err != nil {
		t.Fatalf("Reset = %v", err)
	}
	if st := status(t, s, id); st != uploader.StatusPending {
		t.Errorf("status after reset = %s, want pending", st)
	}
	audit, err := s.Audit(ctx, id)
	if err != nil || len(audit) != 2 || audit[0].Kind != uploader.AuditGiveup || audit[1].Kind != uploader.AuditReset ||
		!strings.Contains(audit[1].Detail, "fixed the tile source") {
		t.Errorf("Audit = %+v, %v, want giveup then reset with the note", audit, err)
	}
}

func TestAuditIsAppendOnly(t *testing.T) {
	ctx := context.Background()
	path := openDB(t)
	s := newStoreAt(t, path, nil)
	tiles := addTiles(t, s, "w", 1, 8)
	if _, err := s.GiveUp(ctx, tiles[0].ID, 1, "r"); err != nil {
		t.Fatal(err)
	}
	db := openRaw(t, path)
	for _, q := range []string{`UPDATE tile_audit SET kind = 'x'`, `DELETE FROM tile_audit`} {
		if _, err := db.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s = %v, want append-only error", q, err)
		}
	}
}

func TestStoreListAndTimestamps(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s := newStore(t, clock)
	addTiles(t, s, "a", 2, 8)
	addTiles(t, s, "b", 3, 8)
	clock.Sleep(ctx, time.Minute)
	all, err := s.List(ctx, uploader.Filter{})
	if err != nil || len(all) != 5 {
		t.Fatalf("List(all) = %d, %v, want 5", len(all), err)
	}
	if err := s.MarkUploaded(ctx, all[0].ID); err != nil {
		t.Fatal(err)
	}
	up, _ := s.List(ctx, uploader.Filter{Status: uploader.StatusUploaded})
	if len(up) != 1 || !up[0].UpdatedAt.Equal(clock.Now().UTC()) || up[0].CreatedAt.Equal(up[0].UpdatedAt) {
		t.Errorf("List(uploaded) = %+v, want 1 tile updated at the clock's now", up)
	}
	if _, err := s.List(ctx, uploader.Filter{Status: "nope"}); !errors.Is(err, uploader.ErrBadStatus) {
		t.Errorf("List(bad status) = %v, want ErrBadStatus", err)
	}
	for _, tc := range []struct {
		workload string
		limit    int
		want     int
	}{{"", 0, 4}, {"b", 0, 3}, {"b", 2, 2}, {"a", 0, 1}, {"zzz", 0, 0}} {
		got, err := s.PendingUploads(ctx, tc.workload, tc.limit)
		if err != nil || len(got) != tc.want {
			t.Errorf("PendingUploads(%q, %d) = %d tiles, %v, want %d", tc.workload, tc.limit, len(got), err, tc.want)
		}
	}
	if err := s.MarkUploaded(ctx, 999); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("MarkUploaded(missing) = %v, want ErrNotFound", err)
	}
	// Re-adding the same content stores nothing new.
	if _, added, err := s.AddFile(ctx, "b", bytes.NewReader(make([]byte, 8)), 8); err != nil || added != 1 {
		t.Errorf("AddFile(new zero tile) = %d added, %v, want 1", added, err)
	}
	if _, added, err := s.AddFile(ctx, "b", bytes.NewReader(make([]byte, 16)), 8); err != nil || added != 0 {
		t.Errorf("AddFile(known tiles) = %d added, %v, want 0", added, err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*uploader.Config)
	}{
		{"servers[0]", func(c *uploader.Config) { c.Servers = []string{"ftp://x"} }},
		{"servers[1]", func(c *uploader.Config) { c.Servers = []string{"http://a", "nohost"} }},
		{"max_in_call_retries", func(c *uploader.Config) { c.MaxInCallRetries = -1 }},
		{"max_per_tile_attempts", func(c *uploader.Config) { c.MaxPerTileAttempts = 0 }},
		{"backoff_base", func(c *uploader.Config) { c.BackoffBase = 0.5 }},
		{"backoff_cap", func(c *uploader.Config) { c.BackoffCap = 0 }},
		{"concurrency", func(c *uploader.Config) { c.Concurrency = 0 }},
		{"min_replicas", func(c *uploader.Config) { c.MinReplicas = 0 }},
		{"min_replicas", func(c *uploader.Config) { c.Servers = []string{"http://a"}; c.MinReplicas = 2 }},
		{"tile_size", func(c *uploader.Config) { c.TileSize = 0 }},
		{"request_timeout", func(c *uploader.Config) { c.RequestTimeout = 0 }},
		{"auth_ttl", func(c *uploader.Config) { c.AuthTTL = 0 }},
	} {
		c := uploader.DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, uploader.ErrBadConfig) || !strings.Contains(err.Error(), "uploader."+tc.field) {
			t.Errorf("Validate(bad %s) = %v, want ErrBadConfig naming uploader.%s", tc.field, err, tc.field)
		}
		var fe *uploader.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Validate(bad %s) = %#v, want a *FieldError with Field %q", tc.field, err, tc.field)
		}
	}
	if err := uploader.DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v, want nil", err)
	}
	if _, err := uploader.BuildUploader(uploader.DefaultConfig(), uploader.Deps{}); !errors.Is(err, uploader.ErrBadConfig) {
		t.Errorf("BuildUploader(no servers) = %v, want ErrBadConfig", err)
	}
}

func TestParseManifestRejectsBadInput(t *testing.T) {
	good := uploader.Manifest{Version: 1, Workload: "w", Size: 5, SHA256: strings.Repeat("a", 64), TileSize: 4,
		Tiles: []uploader.ManifestTile{{SHA256: strings.Repeat("b", 64), Size: 4}, {SHA256: strings.Repeat("c", 64), Size: 1}}}
	j, _ := json.Marshal(good)
	if _, err := uploader.ParseManifest(j); err != nil {
		t.Fatalf("ParseManifest(good) = %v", err)
	}
	for name, edit := range map[string]func(*uploader.Manifest){
		"version":        func(m *uploader.Manifest) { m.Version = 2 },
		"tile size":      func(m *uploader.Manifest) { m.TileSize = 0 },
		"file hash":      func(m *uploader.Manifest) { m.SHA256 = "xyz" },
		"upper hex":      func(m *uploader.Manifest) { m.Tiles[0].SHA256 = strings.Repeat("B", 64) },
		"tile too big":   func(m *uploader.Manifest) { m.Tiles[0].Size = 5; m.Size = 6 },
		"empty tile":     func(m *uploader.Manifest) { m.Tiles[1].Size = 0; m.Size = 4 },
		"size mismatch":  func(m *uploader.Manifest) { m.Size = 99 },
		"negative total": func(m *uploader.Manifest) { m.Size = -1 },
	} {
		m := good
		m.Tiles = append([]uploader.ManifestTile(nil), good.Tiles...)
		edit(&m)
		j, _ := json.Marshal(m)
		if _, err := uploader.ParseManifest(j); !errors.Is(err, uploader.ErrBadManifest) {
			t.Errorf("ParseManifest(%s) = %v, want ErrBadManifest", name, err)
		}
	}
	for _, raw := range []string{``, `[]`, `{"version":1,"extra":1}`, `{"version":1} {}`, `null`} {
		if _, err := uploader.ParseManifest([]byte(raw)); !errors.Is(err, uploader.ErrBadManifest) {
			t.Errorf("ParseManifest(%q) = %v, want ErrBadManifest", raw, err)
		}
	}
}

// A file larger than one commit batch is stored completely, and adding it
// again stores nothing.
func TestAddFileAcrossBatches(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	data := randomBytes(t, 9<<20+12345)
	m, added, err := s.AddFile(ctx, "big", bytes.NewReader(data), 1<<20)
	if err != nil || added != 10 || len(m.Tiles) != 10 || m.SHA256 != sha(data) {
		t.Fatalf("AddFile(9 MiB+) = %d tiles, %d added, %v, want 10, 10, nil", len(m.Tiles), added, err)
	}
	if _, added, err := s.AddFile(ctx, "big", bytes.NewReader(data), 1<<20); err != nil || added != 0 {
		t.Errorf("AddFile(again) = %d added, %v, want 0, nil", added, err)
	}
	if n, err := s.CountPending(ctx, "big"); err != nil || n != 10 {
		t.Errorf("CountPending = %d, %v, want 10", n, err)
	}
	tiles, _ := s.List(ctx, uploader.Filter{Workload: "big"})
	for i, tile := range tiles {
		content, err := s.Content(ctx, tile.ID)
		if err != nil || sha(content) != m.Tiles[i].SHA256 {
			t.Errorf("Content(tile %d) hash = %s, %v, want %s", tile.ID, sha(content), err, m.Tiles[i].SHA256)
		}
	}
}
