package lease

// Script tests (raft datadriven style, hand-rolled): each testdata/*.txt file
// is a sequence of blocks
//
//	# comment
//	command key=value ...
//	----
//	expected output (effects, one per line, or "ok")
//
// separated by blank lines. Times are offsets from t0 ("90s", "13m"), names
// stand for hex pubkeys, relays are numbered 1..3. Run with -rewrite to
// regenerate the expected outputs after a deliberate change, then review the
// diff.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of lease/testdata scripts")

type scriptBlock struct {
	comments []string
	cmd      string
	want     string
}

func parseScript(t *testing.T, path string) []scriptBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile(%s) = %v", path, err)
	}
	var blocks []scriptBlock
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); {
		var b scriptBlock
		for i < len(lines) && (strings.TrimSpace(lines[i]) == "" || strings.HasPrefix(lines[i], "#")) {
			if strings.HasPrefix(lines[i], "#") {
				b.comments = append(b.comments, lines[i])
			}
			i++
		}
		if i >= len(lines) {
			break
		}
		b.cmd = strings.TrimSpace(lines[i])
		i++
		if i >= len(lines) || lines[i] != "----" {
			t.Fatalf("%s:%d: command %q not followed by ----", path, i, b.cmd)
		}
		i++
		var want []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			want = append(want, lines[i])
			i++
		}
		b.want = strings.Join(want, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

func writeScript(t *testing.T, path string, blocks []scriptBlock) {
	t.Helper()
	var sb strings.Builder
	for i, b := range blocks {
		if i > 0 {
			sb.WriteString("\n")
		}
		for _, c := range b.comments {
			sb.WriteString(c + "\n")
		}
		sb.WriteString(b.cmd + "\n----\n" + b.want + "\n")
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatalf("WriteFile(%s) = %v", path, err)
	}
}

func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("Glob(testdata/*.txt) = %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			blocks := parseScript(t, f)
			r := &scriptRunner{t: t}
			for i := range blocks {
				got := r.run(blocks[i].cmd)
				if *rewrite {
					blocks[i].want = got
					continue
				}
				if got != blocks[i].want {
					t.Fatalf("%s: %s =\n%s\nwant\n%s", f, blocks[i].cmd, got, blocks[i].want)
				}
			}
			if *rewrite {
				writeScript(t, f, blocks)
			}
		})
	}
}

type scriptRunner struct {
	t *testing.T
	h *harness
}

type scriptArgs struct {
	t    *testing.T
	cmd  string
	kv   map[string]string
	flag map[string]bool
}

func (a scriptArgs) str(k string) string {
	v, ok := a.kv[k]
	if !ok {
		a.t.Fatalf("%s: missing %s=", a.cmd, k)
	}
	return v
}

func (a scriptArgs) opt(k, def string) string {
	if v, ok := a.kv[k]; ok {
		return v
	}
	return def
}

func (a scriptArgs) dur(k string) time.Duration {
	return a.parseDur(a.str(k))
}

func (a scriptArgs) parseDur(v string) time.Duration {
	if v == "0" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.t.Fatalf("%s: bad duration %q: %v", a.cmd, v, err)
	}
	return d
}

func (a scriptArgs) num(k string) int {
	n, err := strconv.Atoi(a.str(k))
	if err != nil {
		a.t.Fatalf("%s: bad number %s=%q", a.cmd, k, a.kv[k])
	}
	return n
}

func (a scriptArgs) names(k string) []string {
	v := a.opt(k, "")
	if v == "" {
		return nil
	}
	var out []string
	for _, n := range strings.Split(v, ",") {
		out = append(out, key(n))
	}
	return out
}

func (a scriptArgs) relays() []int {
	var out []int
	for _, r := range strings.Split(a.opt("relays", "1,2,3"), ",") {
		n, err := strconv.Atoi(r)
		if err != nil {
			a.t.Fatalf("%s: bad relay %q", a.cmd, r)
		}
		out = append(out, n)
	}
	return out
}

// list parses list=w1:1,w2:2; list=- is an empty list; no list= means an
// unlisted (Paygress-style) heartbeat, returned as nil.
func (a scriptArgs) list() []WorkloadEpoch {
	v, ok := a.kv["list"]
	if !ok {
		return nil
	}
	out := []WorkloadEpoch{}
	if v == "-" {
		return out
	}
	for _, p := range strings.Split(v, ",") {
		id, e, _ := strings.Cut(p, ":")
		n, err := strconv.ParseUint(e, 10, 64)
		if err != nil {
			a.t.Fatalf("%s: bad list entry %q", a.cmd, p)
		}
		out = append(out, WorkloadEpoch{ID: id, Epoch: n})
	}
	return out
}

func (r *scriptRunner) run(line string) string {
	fields := strings.Fields(line)
	a := scriptArgs{t: r.t, cmd: line, kv: map[string]string{}, flag: map[string]bool{}}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else {
			a.flag[f] = true
		}
	}
	if fields[0] != "new" && r.h == nil {
		r.t.Fatalf("%s: no machine; start with new", line)
	}
	switch fields[0] {
	case "new":
		r.h = newHarness(r.t, a.str("self"), func(c *Config) { c.EvictWithoutStandby = a.flag["evict-without-standby"] })
		return "ok"
	case "track":
		spec := Spec{ID: a.str("id"), Primary: key(a.str("primary")), Standbys: a.names("standbys"), Epoch: 1, CreatedAt: t0}
		spec.Replication = ReplicationNone
		if len(spec.Standbys) > 0 {
			spec.Replication = ReplicationWarmStandby
		}
		spec.Replication = Replication(a.opt("repl", string(spec.Replication)))
		spec.RestartPolicy = RestartPolicy{Policy: RestartOnFailure, MaxAttempts: 3}
		if rp := a.opt("restart", ""); rp == "never" {
			spec.RestartPolicy = RestartPolicy{Policy: RestartNever}
		} else if n, ok := strings.CutPrefix(rp, "on-failure:"); ok {
			spec.RestartPolicy.MaxAttempts, _ = strconv.Atoi(n)
		}
		if e := a.opt("epoch", ""); e != "" {
			spec.Epoch = uint64(a.num("epoch"))
		}
		if e := a.opt("expires", ""); e != "" {
			spec.ExpiresAt = at(a.parseDur(e))
		}
		effs, err := r.h.m.Track(at(a.dur("t")), spec)
		if err != nil {
			return "error: " + humanise(err.Error())
		}
		return render(effs)
	case "hb":
		d := a.dur("t")
		created := at(d)
		if c := a.opt("created", ""); c != "" {
			created = at(a.parseDur(c))
		}
		list := a.list()
		var effs []Effect
		for _, rl := range a.relays() {
			effs = append(effs, r.h.m.ObserveHeartbeat(at(d), Heartbeat{
				Provider: key(a.str("from")), Relay: fmt.Sprintf("wss://r%d.test", rl), CreatedAt: created,
				ReceivedAt: at(d), Listed: list != nil, Workloads: list,
			})...)
		}
		return render(effs)
	case "tick":
		return render(r.h.m.Tick(at(a.dur("t"))))
	case "run":
		// run from= to= every= [beat=alice,bob] [list=...] [relays=...]: per
		// step, heartbeats of the beat providers, then a Tick. Prints the
		// effects with their times.
		var lines []string
		beat := a.names("beat")
		list := a.list()
		for d := a.dur("from"); d <= a.dur("to"); d += a.dur("every") {
			var effs []Effect
			for _, p := range beat {
				for _, rl := range a.relays() {
					effs = append(effs, r.h.m.ObserveHeartbeat(at(d), Heartbeat{
						Provider: p, Relay: fmt.Sprintf("wss://r%d.test", rl), CreatedAt: at(d),
						ReceivedAt: at(d), Listed: list != nil, Workloads: list,
					})...)
				}
			}
			effs = append(effs, r.h.m.Tick(at(d))...)
			for _, e := range effs {
				lines = append(lines, fmt.Sprintf("@%v %s", d, humanise(e.String())))
			}
		}
		if len(lines) == 0 {
			return "ok"
		}
		return strings.Join(lines, "\n")
	case "claim":
		return render(r.h.m.ObserveClaim(at(a.dur("t")), PromotionClaim{
			Workload: a.str("id"), Claimer: key(a.str("from")), Epoch: uint64(a.num("epoch")), Active: !a.flag["withdrawn"],
		}))
	case "revoke":
		succ := ""
		if s := a.opt("successor", ""); s != "" {
			succ = key(s)
		}
		// quorum-at: when the holder last had quorum (default t, a holder
		// that revokes while it still has quorum); "none" for unknown.
		q := at(a.dur("t"))
		if v := a.opt("quorum-at", ""); v == "none" {
			q = time.Time{}
		} else if v != "" {
			q = at(a.dur("quorum-at"))
		}
		return render(r.h.m.ObserveRevocation(at(a.dur("t")), Revocation{
			Workload: a.str("id"), Signer: key(a.str("from")), Epoch: uint64(a.num("epoch")), Successor: succ, QuorumAt: q,
		}))
	case "exit":
		return render(r.h.m.ProcessExited(at(a.dur("t")), ProcessExit{Workload: a.str("id"), Epoch: uint64(a.num("epoch")), Reason: a.opt("reason", "exit 1")}))
	case "respawn":
		return render(r.h.m.RespawnDone(at(a.dur("t")), RespawnResult{Workload: a.str("id"), Attempt: a.num("attempt"), OK: a.flag["ok"], Reason: a.opt("reason", "")}))
	case "published":
		return render(r.h.m.ClaimPublished(at(a.dur("t")), ClaimAck{Workload: a.str("id"), Epoch: uint64(a.num("epoch")), Accepted: a.num("accepted")}))
	case "read":
		return render(r.h.m.ClaimsRead(at(a.dur("t")), ClaimRead{Workload: a.str("id"), Epoch: uint64(a.num("epoch")), Relays: a.num("relays"), Competing: a.num("competing")}))
	case "synced":
		return render(r.h.m.RelaySynced(at(a.dur("t")), fmt.Sprintf("wss://r%d.test", a.num("relay"))))
	case "restore":
		b, err := json.Marshal(r.h.m.Snapshot())
		if err != nil {
			r.t.Fatalf("json.Marshal(snapshot) = %v", err)
		}
		var snap Snapshot
		if err := json.Unmarshal(b, &snap); err != nil {
			r.t.Fatalf("json.Unmarshal(snapshot) = %v", err)
		}
		m, effs, err := Restore(at(a.dur("t")), r.h.m.Config(), snap)
		if err != nil {
			return "error: " + err.Error()
		}
		r.h.m = m
		return render(effs)
	case "outstanding":
		return render(r.h.m.Outstanding())
	case "state":
		var lines []string
		for _, id := range r.h.m.IDs() {
			w, _ := r.h.m.Workload(id)
			s := fmt.Sprintf("%s: %s epoch=%d holder=%s since=+%v", id, w.State, w.Epoch, keyName(w.Holder), w.Since.Sub(t0))
			if w.Phase != PhaseNone {
				s += fmt.Sprintf(" claim=%d/%s attempt=%d phase-at=+%v", w.Target, w.Phase, w.ClaimAttempt, w.PhaseAt.Sub(t0))
			}
			if w.Attempts > 0 {
				s += fmt.Sprintf(" respawns=%d", w.Attempts)
			}
			lines = append(lines, s)
		}
		held := r.h.m.Held(nil)
		hs := make([]string, len(held))
		for i, he := range held {
			hs[i] = fmt.Sprintf("%s:%d", he.ID, he.Epoch)
		}
		lines = append(lines, "held: ["+strings.Join(hs, " ")+"]")
		return strings.Join(lines, "\n")
	case "quorum":
		var lines []string
		d := a.dur("t")
		for _, p := range a.names("of") {
			until := r.h.m.QuorumUntil(p)
			s := fmt.Sprintf("%s: quorum=%v", keyName(p), r.h.m.HasQuorum(at(d), p))
			if !until.IsZero() {
				s += fmt.Sprintf(" until=+%v", until.Sub(t0))
			}
			lines = append(lines, s)
		}
		return strings.Join(lines, "\n")
	}
	r.t.Fatalf("unknown command %q", line)
	return ""
}
