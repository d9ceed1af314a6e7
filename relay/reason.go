package relay

import "strings"

// Prefix classes of relay messages (NIP-01's machine-readable prefixes of
// OK and CLOSED reasons, plus the few others real relays send). They are
// the only values Reason.Prefix takes, so they bound the reason label of
// relay_publish_total.
const (
	PrefixDuplicate    = "duplicate"
	PrefixPoW          = "pow"
	PrefixBlocked      = "blocked"
	PrefixRateLimited  = "rate-limited"
	PrefixInvalid      = "invalid"
	PrefixError        = "error"
	PrefixAuthRequired = "auth-required"
	PrefixRestricted   = "restricted"
	PrefixMute         = "mute"
	// PrefixUnsupported: khatru's "unsupported: this relay does not support NIP-45".
	PrefixUnsupported = "unsupported"
	// PrefixReplaced: strfry's OK false "replaced: have newer event" for an
	// addressable event older than the one it stores.
	PrefixReplaced = "replaced"
	// PrefixDeleted: strfry's OK false "deleted: user requested deletion".
	PrefixDeleted = "deleted"
)

// knownPrefixes maps every prefix word accepted (lower-case) to its class.
// "block" (nostr-relay's README plugin example) reads as blocked and
// "reject" (@nostr-relay/core's "reject: event is expired") as invalid.
var knownPrefixes = map[string]string{
	PrefixDuplicate: PrefixDuplicate, PrefixPoW: PrefixPoW, PrefixBlocked: PrefixBlocked,
	PrefixRateLimited: PrefixRateLimited, PrefixInvalid: PrefixInvalid, PrefixError: PrefixError,
	PrefixAuthRequired: PrefixAuthRequired, PrefixRestricted: PrefixRestricted, PrefixMute: PrefixMute,
	PrefixUnsupported: PrefixUnsupported, PrefixReplaced: PrefixReplaced, PrefixDeleted: PrefixDeleted,
	"block": PrefixBlocked, "reject": PrefixInvalid,
}

// wrappers are words some relays put before the machine-readable prefix:
// strfry sends every CLOSED and NOTICE as "ERROR: <reason>" (so a CLOSED
// reads "ERROR: auth-required: requested filter requires authentication").
var wrappers = map[string]bool{"error": true, "notice": true, "warning": true}

// malformedRequest are strfry's words, after its "ERROR: " wrapper, for a
// request it could not accept as sent: "bad req: error parsing #d: filter
// item too large", "bad msg: ...". Sending the same request again cannot
// succeed, so they read as invalid.
var malformedRequest = []string{"bad req:", "bad msg:", "bad close:"}

// Reason is a relay's OK, CLOSED or NOTICE message, parsed.
type Reason struct {
	// Text is the message as the relay sent it.
	Text string
	// Prefix is the machine-readable class, one of the Prefix* constants, or
	// "" when the message has none. It is found case-insensitively, after an
	// optional wrapper ("ERROR: blocked: x" is blocked), and a wrapper with
	// no known prefix after it is itself the class ("ERROR: too many
	// concurrent REQs" is error).
	Prefix string
	// Detail is the text after the prefix (and wrapper), trimmed.
	Detail string
}

// ParseReason parses a relay message; it never fails.
func ParseReason(s string) Reason {
	r := Reason{Text: s}
	rest := strings.TrimSpace(s)
	word, after, ok := cutWord(rest)
	if !ok {
		r.Detail = rest
		return r
	}
	if wrappers[word] {
		if inner, innerAfter, ok := cutWord(after); ok {
			if class, known := knownPrefixes[inner]; known {
				r.Prefix, r.Detail = class, innerAfter
				return r
			}
		}
		lower := strings.ToLower(after)
		for _, m := range malformedRequest {
			if strings.HasPrefix(lower, m) {
				r.Prefix, r.Detail = PrefixInvalid, after
				return r
			}
		}
		if word == PrefixError {
			r.Prefix, r.Detail = PrefixError, after
			return r
		}
		r.Detail = after
		return r
	}
	if class, known := knownPrefixes[word]; known {
		r.Prefix, r.Detail = class, after
		return r
	}
	r.Detail = rest
	return r
}

// cutWord splits "word: rest" into the lower-cased word and the trimmed
// rest; ok is false when s does not start with a prefix-shaped word (letters,
// digits, '-' or '_', then ':').
func cutWord(s string) (word, rest string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || i > 32 {
		return "", s, false
	}
	for _, c := range s[:i] {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return "", s, false
		}
	}
	return strings.ToLower(s[:i]), strings.TrimSpace(s[i+1:]), true
}

// reasonPrefix returns the class of an OK, CLOSED or NOTICE message.
func reasonPrefix(reason string) string { return ParseReason(reason).Prefix }

// permanentClosed reports whether a CLOSED of this class means "do not
// resubscribe on this connection" (auth-required is decided separately).
func permanentClosed(prefix string) bool {
	switch prefix {
	case PrefixBlocked, PrefixRestricted, PrefixUnsupported, PrefixInvalid, PrefixPoW:
		return true
	}
	return false
}
