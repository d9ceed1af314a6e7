package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
)

// Verdict is what the agent does with one event in a context.
type Verdict struct {
	// Accepted is true when the agent acts on the event.
	Accepted bool
	// Reason is the reason code of a refusal (heartbeat.RejectReason), ""
	// when accepted.
	Reason heartbeat.RejectReason
	// Err is the refusal, nil when accepted.
	Err error
	// ID and Kind are the event's, when it parsed as an event.
	ID   string
	Kind int
	// Reads is what the agent read from an accepted event.
	Reads map[string]any
}

// Judge runs one event (its JSON object) through the agent's own ingest,
// heartbeat.Ingestor.IngestRaw (size, kind, time window and expiry, id,
// decoding, the signer rules, the signature), under a signer policy and
// limits built from c, at c.Now. A fresh Ingestor judges each event, so a
// verdict never depends on the events judged before it. The error is for a
// bad context only.
func Judge(ctx context.Context, c Context, raw []byte) (Verdict, error) {
	cfg, err := c.Limits.config()
	if err != nil {
		return Verdict{}, err
	}
	pol, err := newPolicy(c)
	if err != nil {
		return Verdict{}, err
	}
	in, err := heartbeat.NewIngestor(cfg, pol, nil, nil)
	if err != nil {
		return Verdict{}, err
	}
	// The size a relay measures: the event without insignificant space.
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		raw = compact.Bytes()
	}
	var v Verdict
	var ev nostr.Event
	if ev.UnmarshalJSON(raw) == nil {
		v.ID, v.Kind = ev.ID, ev.Kind
	}
	got, err := in.IngestRaw(ctx, time.Unix(c.Now, 0).UTC(), raw)
	if err != nil {
		v.Reason, v.Err = heartbeat.ReasonOf(err), err
		if v.Reason == "" {
			return Verdict{}, fmt.Errorf("judge: %w", err)
		}
		return v, nil
	}
	v.Accepted = true
	v.Reads = reads(got)
	return v, nil
}

// SigValid reports whether the event is signed as NIP-01 says: id, pubkey
// and sig are lowercase hex of 32, 32 and 64 bytes, the id is the sha256
// of the event's serialization and the signature verifies. It is what a
// Nostr library checks before any protocol rule.
func SigValid(raw []byte) bool {
	var ev nostr.Event
	if ev.UnmarshalJSON(raw) != nil || len(ev.ID) != 64 || len(ev.PubKey) != 64 || len(ev.Sig) != 128 ||
		!identity.IsLowerHex(ev.ID+ev.PubKey+ev.Sig) || !ev.CheckID() {
		return false
	}
	ok, err := ev.CheckSignature()
	return ok && err == nil
}
