package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"provideragent/config"
	"provideragent/identity"
)

func TestKeygen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "id.key")
	var out, errb bytes.Buffer
	if code := runMain(ctx, []string{"keygen", "--out", path}, &out, &errb); code != 0 {
		t.Fatalf("keygen exit = %d (stderr %q), want 0", code, errb.String())
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file = %v, %v, want mode 0600", st, err)
	}
	sk, err := config.LoadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := identity.PublicKeyOf(sk)
	npub, _ := identity.EncodeNpub(pub)
	s := out.String()
	if !strings.Contains(s, "npub: "+npub) || !strings.Contains(s, "hex:  "+pub) {
		t.Errorf("keygen output = %q, want npub %s and hex %s", s, npub, pub)
	}
	if strings.Contains(s+errb.String(), sk) {
		t.Fatal("keygen printed the secret key")
	}

	// A second run refuses to overwrite.
	out.Reset()
	errb.Reset()
	if code := runMain(ctx, []string{"keygen", "--out", path}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "refusing to overwrite") {
		t.Errorf("keygen over an existing file = exit %d, stderr %q, want 1 and a refusal", code, errb.String())
	}
	if sk2, _ := config.LoadKeyFile(path); sk2 != sk {
		t.Error("keygen changed an existing key file")
	}
}

func TestKeygenUsage(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"keygen", "--help"}, 0, "Example:"},
		{[]string{"keygen"}, 2, "--out FILE is required"},
		{[]string{"keygen", "--out", "x", "extra"}, 2, "unexpected argument"},
		{[]string{"keygen", "--bogus"}, 2, "bogus"},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := runMain(ctx, tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("runMain(%q) = %d, output %q, want %d and %q", tc.args, code, out.String()+errb.String(), tc.code, tc.want)
		}
	}
}
