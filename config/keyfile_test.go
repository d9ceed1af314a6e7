package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nbd-wtf/go-nostr/nip19"

	"provideragent/identity"
)

func TestGenerateAndLoadKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.key")
	pub, err := GenerateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("GenerateKeyFile mode = %04o, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if len(data) != 65 || data[64] != '\n' {
		t.Errorf("GenerateKeyFile content length = %d, want 64 hex + newline", len(data))
	}
	sk, err := LoadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := identity.PublicKeyOf(sk); got != pub {
		t.Errorf("PublicKeyOf(LoadKeyFile()) = %s, want %s", got, pub)
	}
	if strings.Contains(pub, sk) {
		t.Fatal("public key output contains the secret")
	}
	if _, err := GenerateKeyFile(path); !errors.Is(err, ErrKeyFileExists) {
		t.Errorf("GenerateKeyFile(existing) = %v, want ErrKeyFileExists", err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(data) {
		t.Error("GenerateKeyFile(existing) changed the file")
	}
}

func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	const skHex = "0000000000000000000000000000000000000000000000000000000000000003"
	nsec, err := nip19.EncodePrivateKey(skHex)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		content string
		mode    os.FileMode
		want    error // nil = success
	}{
		{"hex", skHex + "\n", 0o600, nil},
		{"upper hex with blanks", "  " + strings.ToUpper(skHex) + " \n\n", 0o400, nil},
		{"nsec", nsec + "\n", 0o600, nil},
		{"group readable", skHex, 0o640, ErrKeyFileMode},
		{"world readable", skHex, 0o604, ErrKeyFileMode},
		{"group writable", skHex, 0o620, ErrKeyFileMode},
		{"npub is not a secret", "npub1flwvqsh5vyveclsd5guhk626q2tk6cmgn4w3ef9d8euhw0qtnflq3cp0yj", 0o600, ErrKeyFileContent},
		{"empty", "", 0o600, ErrKeyFileContent},
		{"garbage", "hello", 0o600, ErrKeyFileContent},
		{"zero key", strings.Repeat("0", 64), 0o600, ErrKeyFileContent},
		{"huge", strings.Repeat("a", 10000), 0o600, ErrKeyFileContent},
	}
	for i, tc := range cases {
		path := filepath.Join(dir, "k"+string(rune('a'+i)))
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		sk, err := LoadKeyFile(path)
		if tc.want == nil {
			if err != nil || sk != skHex {
				t.Errorf("LoadKeyFile(%s) = %q, %v, want %q, nil", tc.name, sk, err, skHex)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("LoadKeyFile(%s) = %v, want %v", tc.name, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("LoadKeyFile(%s) = %v, want the path named", tc.name, err)
		}
		if tc.want == ErrKeyFileMode && !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("LoadKeyFile(%s) = %v, want the chmod 600 hint", tc.name, err)
		}
		if len(tc.content) >= 64 && strings.Contains(err.Error(), tc.content[:64]) {
			t.Errorf("LoadKeyFile(%s) error leaks the file content", tc.name)
		}
	}
	if _, err := LoadKeyFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeyFile(missing) = %v, want ErrNotExist", err)
	}
	if _, err := LoadKeyFile(dir); err == nil {
		t.Errorf("LoadKeyFile(directory) = nil, want error")
	}
}

func TestLoadKeyFileNamesMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	os.WriteFile(path, []byte("x"), 0o600)
	os.Chmod(path, 0o644)
	_, err := LoadKeyFile(path)
	if err == nil || !strings.Contains(err.Error(), "mode 0644") || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Errorf("LoadKeyFile(0644) = %v, want mode 0644 and 'chmod 600 %s'", err, path)
	}
}
