package heartbeat

import (
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
