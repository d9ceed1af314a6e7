package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"provideragent/agent/backend"
)

// TestREADMEDocumentsEverySetting: every key of the config file has a row
// in the README's configuration table, the workload environment is
// described, and no link leads outside the repository (a clone has nothing
// there).
func TestREADMEDocumentsEverySetting(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	var keys []string
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		sec := ct.Field(i)
		st := sec.Type
		for j := range st.NumField() {
			if tag := strings.Split(st.Field(j).Tag.Get("toml"), ",")[0]; tag != "" && tag != "-" {
				keys = append(keys, strings.Split(sec.Tag.Get("toml"), ",")[0]+"."+tag)
			}
		}
	}
	if len(keys) < 30 {
		t.Fatalf("found %d config keys by their toml tags, want the whole file's", len(keys))
	}
	documented := readmeSettings(readme)
	for _, k := range keys {
		if !documented[k] {
			t.Errorf("README has no configuration row for %s", k)
		}
	}
	for _, env := range []string{"PROVIDER_AGENT_WORKLOAD_ID", "PROVIDER_AGENT_EPOCH", backend.MarkerEnv} {
		if !strings.Contains(readme, "`"+env+"`") {
			t.Errorf("README does not describe the workload environment variable %s", env)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(readme, -1) {
		if link := m[1]; strings.HasPrefix(link, "../") || strings.HasPrefix(link, "/") {
			t.Errorf("README links %s, outside the repository", link)
		}
	}
}

// readmeSettings are the keys the README's configuration table names in
// its rows' first cells: "`lease.t1` / `lease.t2`", "`uploader.tile_size`
// / `concurrency`" (the row's section) and "`lease.claim_retry_base` /
// `_max`" (the first key's stem).
func readmeSettings(readme string) map[string]bool {
	out := map[string]bool{}
	name := regexp.MustCompile("`([a-z0-9_.]+)`")
	for _, line := range strings.Split(readme, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		var section, last string
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			k := m[1]
			switch {
			case strings.Contains(k, "."):
				section, _, _ = strings.Cut(k, ".")
				last = k
			case section == "":
				continue
			case strings.HasPrefix(k, "_"):
				k = last[:strings.LastIndex(last, "_")] + k
			default:
				k = section + "." + k
			}
			out[k] = true
		}
	}
	return out
}
