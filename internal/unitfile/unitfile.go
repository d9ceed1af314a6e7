// Package unitfile reads a systemd unit file's settings for the tests of
// the units (deploy) and of the documented install (cmd/provider-agent):
// "Key=value" lines, continuation lines joined, comments, blank lines and
// section headers left out.
package unitfile

import (
	"os"
	"strings"
)

// Settings returns the settings of the unit file at path, in order.
func Settings(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	cont := ""
	for _, l := range strings.Split(string(raw), "\n") {
		l = strings.TrimSpace(l)
		if cont == "" && (l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[")) {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cont += s + " "
			continue
		}
		out = append(out, cont+l)
		cont = ""
	}
	return out, nil
}
