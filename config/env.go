package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every environment override: PROVIDER_AGENT_<SECTION>_<KEY>
// with the TOML section and key in upper case, for example
// PROVIDER_AGENT_LEASE_QUORUM=2 or PROVIDER_AGENT_LEASE_RELAYS=wss://a,wss://b.
const EnvPrefix = "PROVIDER_AGENT_"

// EnvConfigPath names the config file when --config is not given.
const EnvConfigPath = EnvPrefix + "CONFIG"

// ApplyEnv applies the PROVIDER_AGENT_<SECTION>_<KEY>=value entries of
// environ (as from os.Environ) to c. Lists are comma separated, maps are
// comma-separated key=value pairs, durations are
// strings such as "30s", booleans are true/false. A variable whose section
// is known but whose key is not, or whose value does not parse, is an error
// naming the variable; variables of unknown sections (and
// PROVIDER_AGENT_CONFIG) are left to other tools.
func (c *Config) ApplyEnv(environ []string) error {
	type field struct {
		path string
		v    reflect.Value
	}
	sections := map[string]bool{}
	fields := map[string]field{}
	walkFields(c, func(section, key string, v reflect.Value) {
		sections[strings.ToUpper(section)] = true
		fields[strings.ToUpper(section+"_"+key)] = field{section + "." + key, v}
	})
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == EnvConfigPath {
			continue
		}
		rest := strings.TrimPrefix(name, EnvPrefix)
		sec, _, _ := strings.Cut(rest, "_")
		if !sections[sec] {
			continue
		}
		f, ok := fields[rest]
		if !ok {
			return &parseError{msg: fmt.Sprintf("config: environment %s: no such setting in [%s]", name, strings.ToLower(sec))}
		}
		if err := setFromString(f.v, val); err != nil {
			return &parseError{msg: fmt.Sprintf("config: environment %s (%s) = %q: %v", name, f.path, val, err)}
		}
	}
	return nil
}

// setFromString parses s into v according to v's type.
func setFromString(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a duration such as \"30s\"")
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want an integer")
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		v.SetBool(b)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.ValueOf(splitList(s)))
	case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String:
		m := map[string]string{}
		for _, kv := range splitList(s) {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return fmt.Errorf("want key=value pairs, comma separated")
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
		v.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// splitList splits a comma-separated list, trimming blanks and dropping empty
// entries.
func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
