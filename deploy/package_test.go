package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// debEnv names a package .ci/run built (go -C deploy/package run .), which
// the tests use instead of building one.
const debEnv = "PROVIDER_AGENT_DEB"

var (
	debOnce sync.Once
	debPath string
	debErr  error
)

// debPackage returns the Debian package: $PROVIDER_AGENT_DEB, else one
// built here from this tree (about a minute the first time: nfpm's
// module compiles once).
func debPackage(t *testing.T) string {
	t.Helper()
	tool(t, "dpkg-deb")
	if p := os.Getenv(debEnv); p != "" {
		return p
	}
	debOnce.Do(func() {
		dir, err := os.MkdirTemp("", "provider-agent-deb-")
		if err != nil {
			debErr = err
			return
		}
		bin := filepath.Join(dir, "provider-agent")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/provider-agent").CombinedOutput(); err != nil {
			debErr = &cmdError{"go build", err, out}
			return
		}
		out, err := exec.Command("go", "-C", "package", "run", ".", "-binary", bin, "-repo", "../..", "-out", dir).Output()
		if err != nil {
			debErr = &cmdError{"go -C deploy/package run .", err, out}
			return
		}
		debPath = strings.TrimSpace(string(out))
	})
	if debErr != nil {
		t.Fatalf("build the package: %v", debErr)
	}
	return debPath
}

type cmdError struct {
	what string
	err  error
	out  []byte
}

func (e *cmdError) Error() string { return e.what + ": " + e.err.Error() + "\n" + string(e.out) }

// TestPackageContents: the package installs the binary, both units (run
// from /usr/bin, naming docs the package has), the example config as a
// conffile with the units' data dir, the docs, the alert rules and the
// dashboard, and /var/lib/provider-agent (0755), data/ (0700) and
// workloads/ (0711), all root's; its postinst makes the system user and
// the directories with the same modes.
func TestPackageContents(t *testing.T) {
	deb := debPackage(t)
	list, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --contents %s: %v", deb, err)
	}
	got := map[string]string{} // path -> "mode owner"
	row := regexp.MustCompile(`(?m)^(\S+) (\S+)\s+\d+ \S+ \S+ \./(\S*?)/?$`)
	for _, m := range row.FindAllStringSubmatch(string(list), -1) {
		got["/"+m[3]] = m[1] + " " + m[2]
	}
	for path, want := range map[string]string{
		"/usr/bin/provider-agent":                             "-rwxr-xr-x root/root",
		"/lib/systemd/system/provider-agent.service":          "-rw-r--r-- root/root",
		"/lib/systemd/system/provider-agent-podman.service":   "-rw-r--r-- root/root",
		"/etc/provider-agent/provider-agent.toml":             "-rw-r--r-- root/root",
		"/usr/share/doc/provider-agent/docs/runbooks.md":      "-rw-r--r-- root/root",
		"/usr/share/doc/provider-agent/docs/deployment.md":    "-rw-r--r-- root/root",
		"/usr/share/doc/provider-agent/docs/operations.md":    "-rw-r--r-- root/root",
		"/usr/share/provider-agent/prometheus/alerts.yml":     "-rw-r--r-- root/root",
		"/usr/share/provider-agent/systemd/unprivileged.conf": "-rw-r--r-- root/root",
		"/var/lib/provider-agent":                             "drwxr-xr-x root/root",
		"/var/lib/provider-agent/data":                        "drwx------ root/root",
		"/var/lib/provider-agent/workloads":                   "drwx--x--x root/root",
	} {
		if got[path] != want {
			t.Errorf("package: %s is %q, want %q", path, got[path], want)
		}
	}
	extract := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--extract", deb, extract).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --extract: %v\n%s", err, out)
	}
	for _, u := range []string{"provider-agent.service", "provider-agent-podman.service"} {
		for _, l := range unitLines(t, filepath.Join(extract, "lib/systemd/system", u)) {
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok && !strings.HasPrefix(v, "/usr/bin/provider-agent ") {
				t.Errorf("packaged %s: ExecStart=%s, want the packaged /usr/bin/provider-agent", u, v)
			}
			if v, ok := strings.CutPrefix(l, "Documentation="); ok {
				for _, d := range strings.Fields(v) {
					if _, err := os.Stat(filepath.Join(extract, strings.TrimPrefix(d, "file:"))); err != nil {
						t.Errorf("packaged %s: Documentation=%s is not in the package", u, d)
					}
				}
			}
		}
	}
	cfg, err := os.ReadFile(filepath.Join(extract, "etc/provider-agent/provider-agent.toml"))
	if err != nil || !bytes.Contains(cfg, []byte(`data_dir = "/var/lib/provider-agent/data"`)) {
		t.Errorf("packaged config: %v; want data_dir = \"/var/lib/provider-agent/data\"", err)
	}
	ctrl := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--control", deb, ctrl).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --control: %v\n%s", err, out)
	}
	conffiles, _ := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	if strings.TrimSpace(string(conffiles)) != "/etc/provider-agent/provider-agent.toml" {
		t.Errorf("conffiles = %q, want the config", conffiles)
	}
	postinst, _ := os.ReadFile(filepath.Join(ctrl, "postinst"))
	for _, want := range []string{"adduser --system --group", "useradd --system", "install -d -m 0755 -o root -g root /var/lib/provider-agent\n",
		"install -d -m 0700 -o root -g root /var/lib/provider-agent/data", "install -d -m 0711 -o root -g root /var/lib/provider-agent/workloads"} {
		if !strings.Contains(string(postinst), want) {
			t.Errorf("postinst lacks %q", want)
		}
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		if st, err := os.Stat(filepath.Join(ctrl, s)); err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("maintainer script %s: %v, want it executable", s, err)
		}
	}
}

// TestPackageInstalls installs the package on a fresh system, as the unit
// trials of docs/deployment.md boot one (deploy/systemd/trial/run-trials
// --package: systemd as PID 1 in a container over a volatile overlay of
// this host's root, loopback only): dpkg -i with its maintainer scripts,
// local relays in the config, a key, doctor, systemctl start, a workload,
// dpkg -r. Root and systemd-nspawn only, and where DEPLOY_TOOLS_REQUIRED
// is set (CI's deploy step; about 10 s).
func TestPackageInstalls(t *testing.T) {
	if os.Getenv(requiredEnv) == "" {
		t.Skipf("the install trial runs where $%s is set (CI's deploy step)", requiredEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("the install trial boots a container: root only")
	}
	tool(t, "systemd-nspawn")
	deb := debPackage(t)
	out, err := exec.Command(filepath.Join("systemd", "trial", "run-trials"), "--package", deb).CombinedOutput()
	line := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "package |") {
			line = l
		}
	}
	if err != nil || line == "" {
		t.Fatalf("run-trials --package %s: %v\n%s", deb, err, out)
	}
	t.Log(line)
	for _, want := range []string{"dpkg -i: ok", "user: provider-agent:/var/lib/provider-agent:", "/var/lib/provider-agent 755 root",
		"/var/lib/provider-agent/data 700 root", "/var/lib/provider-agent/workloads 711 root", "unit: /lib/systemd/system/provider-agent.service",
		"doctor: ok", "start: active", "synced: true", "workload: uid 1900000000", "dpkg -r: ok, key kept: yes"} {
		if !strings.Contains(line, want) {
			t.Errorf("the install trial's line lacks %q", want)
		}
	}
}
