package heartbeat

import (
	"strconv"

	"github.com/nbd-wtf/go-nostr"
)

// firstTag returns the value of the first tag named key that has a value.
func firstTag(tags nostr.Tags, key string) (string, bool) {
	for _, t := range tags {
		if len(t) >= 2 && t[0] == key {
			return t[1], true
		}
	}
	return "", false
}

// hasTag reports whether a tag [key, value, ...] is present.
func hasTag(tags nostr.Tags, key, value string) bool {
	for _, t := range tags {
		if len(t) >= 2 && t[0] == key && t[1] == value {
			return true
		}
	}
	return false
}

// requireTags checks the tags every protocol event of a Paygress kind carries:
// each [t, value] in ts and [v, 1].
func requireTags(tags nostr.Tags, ts ...string) *RejectError {
	for _, t := range ts {
		if !hasTag(tags, "t", t) {
			return reject(ReasonBadTags, "missing tag t=%s", t)
		}
	}
	v, ok := firstTag(tags, "v")
	if !ok {
		return reject(ReasonBadTags, "missing tag v")
	}
	if v != versionTag {
		return reject(ReasonBadTags, "unsupported schema version tag v=%.16q", v)
	}
	return nil
}

// expiration returns the NIP-40 expiration (unix seconds) if the event has
// one. A malformed expiration tag is an error: relays and peers would read it
// differently.
func expiration(tags nostr.Tags) (int64, bool, *RejectError) {
	for _, t := range tags {
		if len(t) >= 1 && t[0] == "expiration" {
			if len(t) < 2 {
				return 0, false, reject(ReasonBadTags, "expiration tag without value")
			}
			v, err := strconv.ParseInt(t[1], 10, 64)
			if err != nil || v < 0 || v > maxUnix {
				return 0, false, reject(ReasonBadTags, "expiration tag %.24q is not a unix time", t[1])
			}
			return v, true, nil
		}
	}
	return 0, false, nil
}
