// Command package builds provider-agent's Debian package with nfpm (as a
// Go module: no tool to install): the binary in /usr/bin, the systemd
// units in /lib/systemd/system (their ExecStart pointed at /usr/bin), the
// example config as a conffile in /etc/provider-agent, the docs, the alert
// rules and the dashboard under /usr/share, and maintainer scripts
// (scripts/) that create the system user provider-agent and
// /var/lib/provider-agent (0755), its data/ (0700) and workloads/ (0711).
// It is a module of its own, so that nfpm's dependencies stay out of the
// agent's. docs/deployment.md, "The Debian package".
//
//	go build -o /tmp/pa/provider-agent ./cmd/provider-agent
//	go -C deploy/package run . -binary /tmp/pa/provider-agent -out /tmp/pa
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

// Where the package puts things.
const (
	binPath   = "/usr/bin/provider-agent"
	unitDir   = "/lib/systemd/system"
	configDst = "/etc/provider-agent/provider-agent.toml"
	docDir    = "/usr/share/doc/provider-agent"
	shareDir  = "/usr/share/provider-agent"
	stateDir  = "/var/lib/provider-agent"
)

const usage = `Usage: go -C deploy/package run . -binary FILE [-repo DIR] [-version V] [-arch A] [-out DIR]

Builds provider-agent_<version>_<arch>.deb in -out from the provider-agent
binary FILE and the repository's deploy/ and docs/ (-repo, default ../..,
the repository root when run from deploy/package). The version defaults to
the binary's own (provider-agent version: a tag, else 0.0.0~git<commit>).
It prints the package's path.

Example:
  go build -o /tmp/pa/provider-agent ./cmd/provider-agent
  go -C deploy/package run . -binary /tmp/pa/provider-agent -out /tmp/pa
  sudo apt-get install /tmp/pa/provider-agent_*.deb`

func main() {
	fs := flag.NewFlagSet("package", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, usage); fs.PrintDefaults() }
	bin := fs.String("binary", "", "the provider-agent `binary` to package (required)")
	repo := fs.String("repo", filepath.Join("..", ".."), "the repository's root `dir`")
	version := fs.String("version", "", "package `version` (default: the binary's)")
	arch := fs.String("arch", runtime.GOARCH, "Debian `architecture` of the binary")
	out := fs.String("out", ".", "`dir` to write the package to")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "package: -binary FILE is required")
		os.Exit(2)
	}
	path, err := build(*bin, *repo, *version, *arch, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// build writes the package and returns its path.
func build(bin, repo, version, arch, out string) (string, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if version == "" {
		if version, err = binaryVersion(bin); err != nil {
			return "", err
		}
	}
	stage, err := os.MkdirTemp("", "provider-agent-package-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)

	var contents files.Contents
	add := func(src, dst string, mode os.FileMode, typ string) {
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode}})
	}
	add(bin, binPath, 0o755, "")
	// The units as shipped in deploy/systemd, run from /usr/bin.
	for _, u := range []string{"provider-agent.service", "provider-agent-podman.service"} {
		raw, err := os.ReadFile(filepath.Join(repo, "deploy", "systemd", u))
		if err != nil {
			return "", err
		}
		text := strings.ReplaceAll(string(raw), "/usr/local/bin/provider-agent", binPath)
		if err := os.WriteFile(filepath.Join(stage, u), []byte(text), 0o644); err != nil {
			return "", err
		}
		add(filepath.Join(stage, u), unitDir+"/"+u, 0o644, "")
	}
	add(filepath.Join(repo, "deploy", "systemd", "unprivileged.conf"), shareDir+"/systemd/unprivileged.conf", 0o644, "")
	for _, f := range []string{"alerts.yml", "alerts_test.yml", "alertmanager-inhibit.yml", "grafana-dashboard.json"} {
		add(filepath.Join(repo, "deploy", "prometheus", f), shareDir+"/prometheus/"+f, 0o644, "")
	}
	// The example config, at the units' data dir: a conffile, kept on
	// upgrades once edited.
	example, err := exec.Command(bin, "run", "--print-example-config").Output()
	if err != nil {
		return "", fmt.Errorf("%s run --print-example-config: %w", bin, err)
	}
	cfg := strings.Replace(string(example), `data_dir = "provider-agent-data"`, `data_dir = "`+stateDir+`/data"`, 1)
	if cfg == string(example) {
		return "", errors.New("the example config has no data_dir line to set")
	}
	if err := os.WriteFile(filepath.Join(stage, "provider-agent.toml"), []byte(cfg), 0o644); err != nil {
		return "", err
	}
	add(filepath.Join(stage, "provider-agent.toml"), configDst, 0o644, files.TypeConfigNoReplace)
	add(filepath.Join(repo, "README.md"), docDir+"/README.md", 0o644, "")
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		return "", fmt.Errorf("no docs under %s: %v", filepath.Join(repo, "docs"), err)
	}
	for _, d := range docs {
		add(d, docDir+"/docs/"+filepath.Base(d), 0o644, "")
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{stateDir, 0o755}, {stateDir + "/data", 0o700}, {stateDir + "/workloads", 0o711}} {
		add("", d.path, d.mode, files.TypeDir)
	}

	scripts := filepath.Join(repo, "deploy", "package", "scripts")
	info := &nfpm.Info{
		Name:          "provider-agent",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    "provider-agent maintainers <provider-agent@localhost>",
		Description: "single-writer workloads over M-of-N Nostr relays\n" +
			"A daemon a compute provider runs on its node: it heartbeats on Nostr relays,\n" +
			"fences and hands workloads over to a warm standby, and never lets two\n" +
			"providers run the same workload as primary.",
		License: "proprietary",
		MTime:   time.Unix(0, 0).UTC(),
		Overridables: nfpm.Overridables{
			Depends:  []string{"adduser | passwd"},
			Suggests: []string{"podman", "runc", "sqlite3"},
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(scripts, "postinst.sh"),
				PreRemove:   filepath.Join(scripts, "prerm.sh"),
				PostRemove:  filepath.Join(scripts, "postrm.sh"),
			},
		},
	}
	if err := nfpm.PrepareForPackager(nfpm.WithDefaults(info), "deb"); err != nil {
		return "", err
	}
	pkgr, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(out, pkgr.ConventionalFileName(info))
	var buf bytes.Buffer
	if err := pkgr.Package(info, &buf); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

// binaryVersion is the package version of a binary: its module version
// without the v when it is a release, else 0.0.0~git<commit>.
func binaryVersion(bin string) (string, error) {
	raw, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		return "", fmt.Errorf("%s version --json: %w", bin, err)
	}
	var v struct {
		Version  string `json:"version"`
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%s version --json: %w", bin, err)
	}
	if strings.HasPrefix(v.Version, "v") && !strings.Contains(v.Version, "-0.") {
		return strings.TrimPrefix(v.Version, "v"), nil
	}
	commit := "unknown"
	if len(v.Revision) >= 12 {
		commit = v.Revision[:12]
	}
	return "0.0.0~git" + commit, nil
}
