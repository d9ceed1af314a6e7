package agent

import "sync"

// guarded is state any goroutine may reach, but only under its lock: with
// is the one way in once it is shared (a constructor may set v before).
type guarded[T any] struct {
	mu sync.Mutex
	v  T
}

// with runs f on the state under the lock.
func (g *guarded[T]) with(f func(*T)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(&g.v)
}
