package backend

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckpointDirIsTheStartsDir: the directory CheckpointDir makes
// before a start is the one the started workload gets as
// PROVIDER_AGENT_CHECKPOINT_DIR, owned by the user it runs as, and a file
// the agent placed there (owned by that user) is the workload's to read.
func TestCheckpointDirIsTheStartsDir(t *testing.T) {
	t.Parallel()
	b := newTest(t, time.Second)
	d, err := b.CheckpointDir("ck.1", 4)
	if err != nil {
		t.Fatalf("CheckpointDir = %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(d.Path, &st); err != nil || int(st.Uid) != d.UID || int(st.Gid) != d.GID || st.Mode&0o777 != 0o700 {
		t.Fatalf("%s: uid %d gid %d mode %o (%v), want %d:%d 0700", d.Path, st.Uid, st.Gid, st.Mode&0o777, err, d.UID, d.GID)
	}
	placed := filepath.Join(d.Path, "checkpoint")
	if err := os.WriteFile(placed, []byte("restored 41"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(placed, d.UID, d.GID); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "ck.1", Epoch: 4,
		Command: ShellCommand(`echo "dir $PROVIDER_AGENT_CHECKPOINT_DIR uid $(id -u) state $(cat "$PROVIDER_AGENT_CHECKPOINT_DIR/checkpoint")"`)}); err != nil {
		t.Fatal(err)
	}
	nextExit(t, b)
	data, _ := os.ReadFile(b.LogPath("ck.1"))
	want := "dir " + d.Path + " uid " + strconv.Itoa(d.UID) + " state restored 41"
	if !strings.Contains(string(data), want) {
		t.Errorf("workload said %q, want %q", data, want)
	}
	if _, err := b.CheckpointDir("", 1); err == nil {
		t.Errorf("CheckpointDir of an empty id = nil, want an error")
	}
}
