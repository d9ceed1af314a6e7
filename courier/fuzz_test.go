package courier

import (
	"errors"
	"testing"
	"time"
)

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"000000000000002a", "FFFFFFFFFFFFFFFF", "", "zz", "0000000000000000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) = %v, want ErrInvalidID", s, err)
			}
			return
		}
		back, err := ParseID(id.String())
		if err != nil || back != id || id == 0 {
			t.Fatalf("ParseID(%q).String() round trip = %v, %v, want %v", s, back, err, id)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "5", "Mon, 02 Jan 2006 15:04:05 GMT", "-1", "1e9", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d := ParseRetryAfter(s, now)
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v, want within [0, %v]", s, d, maxRetryAfter)
		}
	})
}

func FuzzValidateSend(f *testing.F) {
	f.Add("alice", "key-1")
	f.Add("", "")
	f.Add("a b", "\x00")
	f.Fuzz(func(t *testing.T, sender, key string) {
		for _, c := range []struct {
			s        string
			optional bool
		}{{sender, false}, {key, true}} {
			err := validateToken("x", c.s, 256, c.optional)
			if err != nil && !errors.Is(err, ErrInvalidSend) {
				t.Fatalf("validateToken(%q) = %v, want ErrInvalidSend", c.s, err)
			}
			if err == nil {
				for i := 0; i < len(c.s); i++ {
					if c.s[i] <= ' ' || c.s[i] > '~' {
						t.Fatalf("validateToken(%q) accepted byte %d", c.s, i)
					}
				}
			}
		}
	})
}
