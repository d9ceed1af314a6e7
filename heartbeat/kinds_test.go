package heartbeat

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNextCreatedAt(t *testing.T) {
	now := time.Unix(1000, 500)
	tests := []struct {
		last, want int64
	}{
		{0, 1000},    // no previous version
		{990, 1000},  // previous one is older
		{1000, 1001}, // same second: strictly after
		{1005, 1006}, // previous one ahead (clock stepped back)
	}
	for _, tt := range tests {
		if got := NextCreatedAt(tt.last, now); got != tt.want {
			t.Errorf("NextCreatedAt(%d, %d) = %d, want %d", tt.last, now.Unix(), got, tt.want)
		}
	}
}

// TestLongestIDFitsFilterItems: every d tag a relay
// filter asks for, built from a workload id of the longest valid length,
// fits strfry's 255-byte filter items, and one byte more is refused with an
// error naming the limit.
func TestLongestIDFitsFilterItems(t *testing.T) {
	id := strings.Repeat("w", MaxWorkloadIDBytes)
	if err := ValidateWorkloadID(id); err != nil {
		t.Fatalf("ValidateWorkloadID(%d bytes) = %v, want nil", len(id), err)
	}
	for name, d := range map[string]string{
		"claim":        ClaimDTag(id),
		"announcement": PromotionDTag(id),
		"lease grant":  LeaseDTag(id),
	} {
		if len(d) > 255 {
			t.Errorf("%s d tag of a %d-byte id is %d bytes, want at most 255", name, len(id), len(d))
		}
	}
	err := ValidateWorkloadID(id + "w")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxWorkloadIDBytes)) {
		t.Fatalf("ValidateWorkloadID(%d bytes) = %v, want an error naming the limit %d", len(id)+1, err, MaxWorkloadIDBytes)
	}
}
