// Package logcapture is a slog.Handler that keeps every record in memory,
// for tests that assert what a component logs: the level, the message and
// the attributes of its operational lines.
//
//	h := logcapture.New(slog.LevelDebug)
//	c, _ := courier.Open(ctx, db, cfg, courier.Deps{Logger: slog.New(h)})
//	...
//	lines := h.Find("courier deliveries failed, retrying with backoff")
package logcapture

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Record is one captured log line.
type Record struct {
	Level   slog.Level
	Message string
	// Attrs are the line's attributes (those of With first), by key; a
	// group's attributes are keyed "group.key".
	Attrs map[string]slog.Value
}

// Int returns attribute key as an int64 (0 and false when absent or not an
// integer).
func (r Record) Int(key string) (int64, bool) {
	v, ok := r.Attrs[key]
	if !ok {
		return 0, false
	}
	switch v.Kind() {
	case slog.KindInt64:
		return v.Int64(), true
	case slog.KindUint64:
		return int64(v.Uint64()), true
	}
	return 0, false
}

// String returns attribute key as text ("" when absent).
func (r Record) String(key string) string {
	v, ok := r.Attrs[key]
	if !ok {
		return ""
	}
	return v.String()
}

// Handler captures records at or above its level. It is safe for
// concurrent use; handlers made by WithAttrs and WithGroup share the store.
type Handler struct {
	level  slog.Leveler
	store  *store
	attrs  []slog.Attr
	groups []string
}

type store struct {
	mu   sync.Mutex
	recs []Record
}

// New returns a handler that keeps records at level and above.
func New(level slog.Leveler) *Handler {
	return &Handler{level: level, store: &store{}}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// Handle implements slog.Handler.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Message: r.Message, Attrs: map[string]slog.Value{}}
	for _, a := range h.attrs {
		addAttr(rec.Attrs, "", a)
	}
	prefix := ""
	if len(h.groups) > 0 {
		prefix = strings.Join(h.groups, ".") + "."
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(rec.Attrs, prefix, a)
		return true
	})
	h.store.mu.Lock()
	h.store.recs = append(h.store.recs, rec)
	h.store.mu.Unlock()
	return nil
}

func addAttr(m map[string]slog.Value, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			addAttr(m, p, g)
		}
		return
	}
	m[prefix+a.Key] = v
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	prefix := ""
	if len(h.groups) > 0 {
		prefix = strings.Join(h.groups, ".") + "."
	}
	c.attrs = slices.Clone(h.attrs)
	for _, a := range attrs {
		a.Key = prefix + a.Key
		c.attrs = append(c.attrs, a)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.groups = append(slices.Clone(h.groups), name)
	return &c
}

// Records returns a copy of every record captured so far, in order.
func (h *Handler) Records() []Record {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	return slices.Clone(h.store.recs)
}

// Find returns the records whose message is msg, in order.
func (h *Handler) Find(msg string) []Record {
	var out []Record
	for _, r := range h.Records() {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}
