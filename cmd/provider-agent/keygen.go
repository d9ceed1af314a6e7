package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"provideragent/config"
	"provideragent/identity"
)

func init() {
	register(command{
		name:    "keygen",
		summary: "create a new identity key file (mode 0600) and print its npub",
		run:     runKeygen,
	})
}

const keygenUsage = `Usage: provider-agent keygen --out FILE

Creates a new secp256k1 identity key for the agent and writes the secret as
64 hex characters to FILE with mode 0600, creating FILE's directory (mode
0700) when missing, and its missing parents mode 0755 (workload users must
reach backend.workload_dir, which lies beside the data dir by default). It refuses to overwrite an existing file. It prints the
public key as npub and as hex (give these to lease issuers and to the other
providers); the secret is never printed.

Example:
  provider-agent keygen --out ./data/identity.key   # the default key file of --data-dir ./data
  provider-agent keygen --out /var/lib/provider-agent/identity.key`

func runKeygen(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("keygen", keygenUsage, stdout)
	out := fs.String("out", "", "key `file` to create (required)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *out == "" {
		return usagef("keygen: --out FILE is required")
	}
	// A fresh data dir: create it (mode 0700) as run would, and its
	// missing parents 0755 (the workloads' directories go beside it).
	if err := config.MakeDataDir(filepath.Dir(*out)); err != nil {
		return fmt.Errorf("keygen: create directory: %w", err)
	}
	pub, err := config.GenerateKeyFile(*out)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	npub, err := identity.EncodeNpub(pub)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s (mode 0600)\nnpub: %s\nhex:  %s\n", *out, npub, pub)
	return nil
}
