package heartbeat

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"provideragent/internal/imagespec"
	"provideragent/lease"
)

// TestLeaseGrantImage: a grant naming an OCI image carries it as an
// "image" object beside the argv to run in it; decoded, the lease's
// command names the image (imagespec), opaque to the machine, and a grant
// built from that command writes the same content again.
func TestLeaseGrantImage(t *testing.T) {
	p, s1 := testKeys(t, "p"), testKeys(t, "s1")
	im := imagespec.Image{Ref: "localhost/bb:1", CPUs: 0.5, MemoryMB: 64, Env: []string{"A=b"}, Network: true}
	params := LeaseGrantParams{WorkloadID: "web", Primary: p.PublicKey(), Standbys: []string{s1.PublicKey()},
		Relays: []string{"wss://r1", "wss://r2"}, Quorum: 2, Replication: lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3}, At: t0,
		Image: &im, Command: []string{"/bin/sh", "-c", "httpd -f"}}
	ev, err := BuildLeaseGrant(p, params)
	if err != nil {
		t.Fatal(err)
	}
	var content map[string]any
	if err := json.Unmarshal([]byte(ev.Content), &content); err != nil {
		t.Fatal(err)
	}
	if img, ok := content["image"].(map[string]any); !ok || img["ref"] != "localhost/bb:1" || img["memory_mb"] != float64(64) {
		t.Errorf("content image = %v, want the image object", content["image"])
	}
	if cmd, _ := content["command"].([]any); len(cmd) != 3 || cmd[2] != "httpd -f" {
		t.Errorf("content command = %v, want the argv run in the image", content["command"])
	}
	g, err := DecodeLeaseGrant(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := imagespec.Encode(im, params.Command)
	if !reflect.DeepEqual(g.Spec.Command, want) {
		t.Errorf("decoded Spec.Command = %q, want %q", g.Spec.Command, want)
	}
	// Republished from the lease (workloads grant --publish does that).
	params.Image, params.Command = nil, g.Spec.Command
	again, err := BuildLeaseGrant(p, params)
	if err != nil {
		t.Fatal(err)
	}
	if again.Content != ev.Content {
		t.Errorf("grant built from the decoded command = %s, want %s", again.Content, ev.Content)
	}
	// Without a command, the image's own runs.
	params.Command = imagespec.Encode(imagespec.Image{Ref: "localhost/bb:1"}, nil)
	if ev, err = BuildLeaseGrant(p, params); err != nil {
		t.Fatal(err)
	}
	if g, err = DecodeLeaseGrant(ev); err != nil || !reflect.DeepEqual(g.Spec.Command, params.Command) {
		t.Errorf("image without a command: %q, %v; want %q", g.Spec.Command, err, params.Command)
	}
}

func TestLeaseGrantImageRefused(t *testing.T) {
	p := testKeys(t, "p")
	base := LeaseGrantParams{WorkloadID: "web", Primary: p.PublicKey(), Relays: []string{"wss://r1"}, Quorum: 1,
		Replication: lease.ReplicationNone, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, At: t0}
	for _, tc := range []struct {
		name   string
		change func(*LeaseGrantParams)
		want   string
	}{
		{"image and manifest", func(l *LeaseGrantParams) { l.Image, l.Manifest = &imagespec.Image{Ref: "x"}, "m" }, "not both"},
		{"bad image", func(l *LeaseGrantParams) { l.Image = &imagespec.Image{Ref: "x", MemoryMB: -1} }, "memory_mb"},
		{"image env of the agent's", func(l *LeaseGrantParams) {
			l.Image = &imagespec.Image{Ref: "x", Env: []string{"PROVIDER_AGENT_EPOCH=9"}}
		}, "PROVIDER_AGENT_"},
		{"malformed encoded command", func(l *LeaseGrantParams) { l.Command = []string{imagespec.Marker, "x"} }, "bad image spec"},
	} {
		l := base
		tc.change(&l)
		if _, err := BuildLeaseGrant(p, l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: BuildLeaseGrant = %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	// A command on the wire that poses as an image is refused.
	ev, err := BuildLeaseGrant(p, func() LeaseGrantParams { l := base; l.Command = []string{"true"}; return l }())
	if err != nil {
		t.Fatal(err)
	}
	ev.Content = strings.Replace(ev.Content, `"command":["true"]`, `"command":["@image","x","--"]`, 1)
	if _, err := DecodeLeaseGrant(ev); err == nil || !strings.Contains(err.Error(), "image field") {
		t.Errorf("DecodeLeaseGrant(command posing as an image) = %v, want it refused", err)
	}
}
