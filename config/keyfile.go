package config

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
)

// Key file errors; the messages of errors wrapping them never contain the
// secret.
var (
	// ErrKeyFileMode means the key file is readable or writable by group or
	// others.
	ErrKeyFileMode = errors.New("key file permissions too open")
	// ErrKeyFileExists means GenerateKeyFile would overwrite a file.
	ErrKeyFileExists = errors.New("key file already exists")
	// ErrKeyFileContent means the file holds no valid secret key.
	ErrKeyFileContent = errors.New("key file does not hold a secret key")
)

// maxKeyFileSize bounds what LoadKeyFile reads: a key is 64 hex characters
// or a 63-character nsec plus white space.
const maxKeyFileSize = 4096

// GenerateKeyFile creates a new secp256k1 identity key and writes it to path
// as 64 hex characters and a newline, with mode 0600. It refuses to overwrite
// an existing file (ErrKeyFileExists) and returns the hex public key. The
// secret is never logged or returned.
func GenerateKeyFile(path string) (pubHex string, err error) {
	sk := nostr.GeneratePrivateKey()
	if sk == "" {
		return "", fmt.Errorf("generate key file %s: no randomness available", path)
	}
	pub, err := identity.PublicKeyOf(sk)
	if err != nil {
		return "", fmt.Errorf("generate key file %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("generate key file %s: refusing to overwrite: %w", path, ErrKeyFileExists)
		}
		return "", fmt.Errorf("generate key file: %w", err)
	}
	// The umask can only narrow 0600, but be explicit about the result.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("generate key file: %w", err)
	}
	if _, err := io.WriteString(f, sk+"\n"); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("generate key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("generate key file: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("generate key file: %w", err)
	}
	return pub, nil
}

// LoadKeyFile reads the secret key at path (64 hex characters or nsec,
// surrounding white space ignored) and returns it as lowercase hex. It refuses
// a file whose mode grants any permission to group or others
// (ErrKeyFileMode; the error names the path, the mode and the chmod fix), and
// a file that is not a regular file.
func LoadKeyFile(path string) (secretHex string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("load key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("load key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("load key file %s: not a regular file: %w", path, ErrKeyFileContent)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("load key file %s: mode %04o lets group or others read it; run 'chmod 600 %s': %w",
			path, perm, path, ErrKeyFileMode)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return "", fmt.Errorf("load key file %s: %w", path, err)
	}
	if len(data) > maxKeyFileSize {
		return "", fmt.Errorf("load key file %s: larger than %d bytes: %w", path, maxKeyFileSize, ErrKeyFileContent)
	}
	sk, err := identity.ParseSecretKey(string(data))
	if err != nil {
		// identity's errors never echo the input.
		return "", fmt.Errorf("load key file %s: %w: %w", path, ErrKeyFileContent, err)
	}
	return sk, nil
}
