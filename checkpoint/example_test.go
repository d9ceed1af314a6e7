package checkpoint_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"provideragent/checkpoint"
)

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
