package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: 'version' and '--version' print the same line, with the Go
// version and a commit; --json has the fields.
func TestVersion(t *testing.T) {
	t.Parallel()
	v := must(t, nil, "version")
	flag := must(t, nil, "--version")
	if v.stdout != flag.stdout {
		t.Errorf("version = %q, --version = %q; want the same", v.stdout, flag.stdout)
	}
	if !strings.HasPrefix(v.stdout, "provider-agent ") || !strings.Contains(v.stdout, runtime.Version()) || !strings.Contains(v.stdout, "commit ") {
		t.Errorf("version = %q, want provider-agent VERSION (commit ..., %s)", v.stdout, runtime.Version())
	}
	var in struct {
		Version   string `json:"version"`
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal([]byte(must(t, nil, "version", "--json").stdout), &in); err != nil || in.Version == "" || in.GoVersion != runtime.Version() {
		t.Errorf("version --json = %+v (%v), want version and go_version %s", in, err, runtime.Version())
	}
	if r := cli(t, nil, "version", "extra"); r.code != 2 {
		t.Errorf("version extra = exit %d, want 2", r.code)
	}
}
