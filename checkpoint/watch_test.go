package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatcherReportsEachRenamedVersionOnce(t *testing.T) {
	dir := t.TempDir()
	w := NewWatcher(time.Hour) // polled by hand
	w.Watch("w1", 3, dir, FileID{})
	w.Poll()
	if got := w.Take(); len(got) != 0 {
		t.Fatalf("no checkpoint yet: Take = %v", got)
	}
	put(t, dir, "one")
	w.Poll()
	select {
	case <-w.Ready():
	default:
		t.Fatalf("Ready not signalled after a new checkpoint")
	}
	got := w.Take()
	if len(got) != 1 || got[0].Workload != "w1" || got[0].Epoch != 3 || got[0].Info.Size != 3 {
		t.Fatalf("Take = %+v, want w1's checkpoint at epoch 3", got)
	}
	w.Poll()
	if got := w.Take(); len(got) != 0 {
		t.Fatalf("the same version again: Take = %v, want nothing", got)
	}
	// A write in place keeps the inode: not reported.
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("in place"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.Poll()
	if got := w.Take(); len(got) != 0 {
		t.Fatalf("a write in place: Take = %v, want nothing", got)
	}
}

// A storm of renames between two takes is one Change, the newest.
func TestWatcherCoalesces(t *testing.T) {
	dir := t.TempDir()
	w := NewWatcher(time.Hour)
	w.Watch("w1", 1, dir, FileID{})
	for i := range 5 {
		put(t, dir, string(rune('a'+i))+"....")
		w.Poll()
	}
	got := w.Take()
	info, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Info.ID != info.ID {
		t.Fatalf("Take after 5 renames = %+v, want one Change of the newest (%v)", got, info.ID)
	}
}

// A known version (restored) is not reported; Unwatch drops what is
// pending and stops reports.
func TestWatcherKnownAndUnwatch(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "restored")
	info, err := Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(time.Hour)
	w.Watch("w1", 2, dir, info.ID)
	w.Poll()
	if got := w.Take(); len(got) != 0 {
		t.Fatalf("the restored version: Take = %v, want nothing", got)
	}
	put(t, dir, "new")
	w.Poll()
	w.Unwatch("w1")
	put(t, dir, "newer")
	w.Poll()
	if got := w.Take(); len(got) != 0 {
		t.Fatalf("after Unwatch: Take = %v, want nothing", got)
	}
}
