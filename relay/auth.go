package relay

// NIP-42: answering a relay's AUTH challenge, and its verdict.

import (
	"fmt"

	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip42"
)

// authenticate answers the relay's AUTH challenge with an event signed by
// the pool's key (none configured: the relay's refusals say so), once per
// connection; the OK that answers it is handled by handleAuthOK.
func (ss *session) authenticate(challenge string) error {
	sk := ss.s.p.opts.SecretKey
	if sk == "" {
		ss.s.log.Debug("relay asks for AUTH, no key configured")
		return nil
	}
	if ss.c.isAuthed() || ss.authOK != nil {
		return nil
	}
	// The relay tag is the canonical relay URL (the one the lease lists),
	// never the address dialled: relays check it against their own public
	// URL (strfry's relay.auth.serviceUrl, @nostr-relay/core's hostname), so
	// an AUTH signed for a tunnel's local address is refused.
	ev := nip42.CreateUnsignedAuthEvent(challenge, ss.s.p.pubkey, ss.s.url)
	if err := ev.Sign(sk); err != nil {
		return fmt.Errorf("sign auth event: %w", err)
	}
	ss.authID = ev.ID
	ss.authOK = ss.c.addPending(ev.ID).ch
	return ss.c.write(nostr.AuthEnvelope{Event: ev})
}

// handleAuthOK takes the relay's verdict on our AUTH: refused, the
// subscriptions waiting for it are handled as closed with the reason;
// accepted, they are sent.
func (ss *session) handleAuthOK(ok nostr.OKEnvelope) error {
	ss.authOK = nil
	if !ok.OK {
		ss.c.failAuth(ok.Reason)
		ss.s.setErr(fmt.Errorf("auth failed: %s", ok.Reason))
		ss.s.log.Warn("relay rejected AUTH", "reason", ok.Reason)
		for _, sub := range ss.subs {
			if sub.state == subWaitAuth {
				if err := ss.handleClosed(sub, "auth-required: AUTH failed: "+ok.Reason); err != nil {
					return err
				}
			}
		}
		return nil
	}
	close(ss.c.authed)
	ss.s.mu.Lock()
	ss.s.st.Authenticated = true
	ss.s.mu.Unlock()
	ss.s.log.Info("authenticated to relay")
	for _, sub := range ss.subs {
		if sub.state == subWaitAuth {
			if err := ss.send(sub); err != nil {
				return err
			}
		}
	}
	return nil
}
