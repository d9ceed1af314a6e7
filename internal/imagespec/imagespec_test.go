package imagespec

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		im   Image
		argv []string
	}{
		{Image{Ref: "localhost/bb:1"}, nil},
		{Image{Ref: "docker.io/library/nginx:1.27", CPUs: 0.5, MemoryMB: 64, Env: []string{"A=b", "C=d=e"}, Network: true},
			[]string{"/bin/sh", "-c", "echo -- hi"}},
	} {
		cmd := Encode(tc.im, tc.argv)
		im, argv, ok, err := Decode(cmd)
		if err != nil || !ok || !reflect.DeepEqual(im, tc.im) || len(argv) != len(tc.argv) || (len(argv) > 0 && !reflect.DeepEqual(argv, tc.argv)) {
			t.Errorf("Decode(Encode(%+v, %q)) = %+v, %q, %v, %v; want the same back", tc.im, tc.argv, im, argv, ok, err)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	if _, _, ok, err := Decode([]string{"/bin/sh", "-c", "x"}); ok || err != nil {
		t.Errorf("Decode(plain command) = ok %v, err %v; want not an image, no error", ok, err)
	}
	for _, cmd := range [][]string{
		{Marker},
		{Marker, "ref"},
		{Marker, "ref", "cpus=1"},
		{Marker, "ref", "bogus=1", "--"},
		{Marker, "ref", "cpus", "--"},
		{Marker, "ref", "cpus=-1", "--"},
		{Marker, "", "--"},
		{Marker, "-v", "--"},
		{Marker, "a b", "--"},
		{Marker, "ref", "env=NOEQUALS", "--"},
		{Marker, "ref", "env=PROVIDER_AGENT_EPOCH=9", "--"},
		{Marker, "ref", "memory_mb=x", "--"},
	} {
		if _, _, ok, err := Decode(cmd); !ok || !errors.Is(err, ErrBadImage) {
			t.Errorf("Decode(%q) = ok %v, err %v; want ErrBadImage", cmd, ok, err)
		}
	}
	if err := (Image{Ref: "r", CPUs: math.NaN()}).Validate(); !errors.Is(err, ErrBadImage) {
		t.Errorf("Validate(cpus NaN) = %v, want ErrBadImage", err)
	}
}
