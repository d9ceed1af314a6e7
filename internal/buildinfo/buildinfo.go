// Package buildinfo says which build of provider-agent is running: the
// module version, the VCS commit, the Go version and the build tags, read
// from the binary itself (runtime/debug.ReadBuildInfo), for the version
// command, the start log, /status and the provider_agent_build_info gauge.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is one build's identity.
type Info struct {
	// Version is the main module's version: a tag (v1.2.3), a pseudo
	// version, or "(devel)" for a build from a work tree.
	Version string `json:"version"`
	// Revision is the VCS commit ("" when the build had no VCS
	// information, e.g. go run or -buildvcs=false); Modified is set when
	// the work tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Time is the commit's time (RFC 3339), "" when unknown.
	Time string `json:"time,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
	// Tags are the build tags (-tags), comma separated; "" for none.
	Tags string `json:"tags,omitempty"`
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", GoVersion: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "vcs.time":
			in.Time = s.Value
		case "-tags":
			in.Tags = s.Value
		}
	}
	return in
}

// Commit is the revision shortened to 12 characters, with "+dirty" when
// the work tree was modified; "unknown" without VCS information.
func (i Info) Commit() string {
	if i.Revision == "" {
		return "unknown"
	}
	c := i.Revision
	if len(c) > 12 {
		c = c[:12]
	}
	if i.Modified {
		c += "+dirty"
	}
	return c
}

// String is one line: "v1.2.3 (commit 0123456789ab, go1.26.8, tags libsecp256k1)".
func (i Info) String() string {
	parts := []string{"commit " + i.Commit(), i.GoVersion}
	if i.Tags != "" {
		parts = append(parts, "tags "+i.Tags)
	}
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}

// MetricName is the build-info gauge's name.
const MetricName = "provider_agent_build_info"

// Register adds the provider_agent_build_info gauge to reg: always 1,
// with the build as its labels (version, revision, goversion, tags), so
// that a query can join it to any series of the same instance.
func Register(reg prometheus.Registerer, i Info) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricName,
		Help: "Always 1; the labels say which build of provider-agent runs: module version, VCS revision, Go version, build tags.",
	}, []string{"version", "revision", "goversion", "tags"})
	g.WithLabelValues(i.Version, i.Commit(), i.GoVersion, i.Tags).Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register %s: %w", MetricName, err)
	}
	return nil
}
