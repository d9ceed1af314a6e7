package agent

import (
	"testing"

	"provideragent/heartbeat"
	"provideragent/relay"
)

func TestBeatBudget(t *testing.T) {
	for _, tt := range []struct {
		name           string
		limits         []relay.Limits
		event, content int
	}{
		{"none advertised", nil, heartbeat.DefaultMaxEventBytes, 0},
		{"a larger frame limit", []relay.Limits{{MaxMessageLength: 131072}}, heartbeat.DefaultMaxEventBytes, 0},
		{"the smallest frame and content win", []relay.Limits{{MaxMessageLength: 16384, MaxContentLength: 9000}, {MaxMessageLength: 32768, MaxContentLength: 4096}},
			16384 - eventFrameOverhead, 4096},
	} {
		if e, c := BeatBudget(tt.limits); e != tt.event || c != tt.content {
			t.Errorf("%s: BeatBudget(%+v) = %d, %d, want %d, %d", tt.name, tt.limits, e, c, tt.event, tt.content)
		}
	}
}

func TestBeatFit(t *testing.T) {
	events, size, err := BeatFit(1000, nil)
	if err != nil || events < 3 || size > heartbeat.DefaultMaxEventBytes {
		t.Errorf("BeatFit(1000, none) = %d events, largest %d, %v; want a few events within %d bytes", events, size, err, heartbeat.DefaultMaxEventBytes)
	}
	if _, _, err := BeatFit(10, []relay.Limits{{MaxMessageLength: 1024, MaxContentLength: 256}}); err == nil {
		t.Errorf("BeatFit(10, 256-byte content) = nil error, want one: a 231-byte workload id alone does not fit")
	}
}
