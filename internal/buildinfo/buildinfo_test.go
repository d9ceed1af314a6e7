package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tt := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"tagged, with VCS and tags", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"},
				{Key: "-tags", Value: "libsecp256k1"}}},
			"v1.2.3 (commit 0123456789ab, go1.26.8, tags libsecp256k1)"},
		{"a modified work tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) (commit abc+dirty, go1.26.8)"},
		{"no VCS, no version", debug.BuildInfo{GoVersion: "go1.26.8"}, "(devel) (commit unknown, go1.26.8)"},
	} {
		if got := fromBuildInfo(&tt.bi).String(); got != tt.want {
			t.Errorf("%s: fromBuildInfo(...).String() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := Info{Version: "v1.2.3", Revision: "0123456789abcdef", GoVersion: "go1.26.8", Tags: "libsecp256k1"}
	if err := Register(reg, in); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP provider_agent_build_info Always 1; the labels say which build of provider-agent runs: module version, VCS revision, Go version, build tags.
# TYPE provider_agent_build_info gauge
provider_agent_build_info{goversion="go1.26.8",revision="0123456789ab",tags="libsecp256k1",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricName); err != nil {
		t.Error(err)
	}
	if err := Register(reg, in); err == nil {
		t.Error("Register twice on one registry = nil, want an error")
	}
}
