package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"provideragent/heartbeat"
	"provideragent/internal/conformance"
)

func init() {
	register(command{
		name:    "check-event",
		summary: "judge Nostr events as the agent would: a verdict and reason code per event",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return runCheckEvent(ctx, args, os.Stdin, stdout)
		},
	})
}

const checkEventUsage = `Usage: provider-agent check-event [flags] [--file FILE]

Reads Nostr events as JSON from stdin (or --file): one event object, a JSON
array of them, or one per line. It judges each on its own, as the agent's
ingest does (docs/nip/XX.md): shape, kind, sizes, the time window and
NIP-40 expiry, the id, the kind's rules, the signer rules, and the
signature. It prints one line per event:

  event 1 (kind 38384, id 3ee7c96757f3): accepted
  event 2 (kind 38385, id bb27f8b48b6a): refused unknown_workload: revocation for unknown or finished workload "web-1"

The verdict depends on a context, which the flags give: the receiver's
clock (--now), the issuers it trusts (lease grants), its own key (--self:
a grant that names it neither as primary nor as standby is refused,
not_named), and the workloads it tracks. A workload's holder alone may revoke it; its members (holder,
primary and standbys) alone may claim it or publish checkpoint records.
--context FILE reads a context in the form of the vector files' "context"
object (testdata/vectors); the flags then override it.

Exit status: 0 when every event is accepted, 1 when one or more is
refused, 2 on bad input (not JSON, no event, an unreadable file, a bad
flag).

Example:
  provider-agent check-event --now 2026-01-01T00:00:00Z \
      --trusted-issuer 439d1a7929d556be949a608b9d8cab87da6cce18287a7d27e85b8f15746fd60f \
      --workload web-1=d29fe18d2ed00fb8882df58cf2f052ec691bd7bbc944bc392dca16e26d93d01d,c5c7639593430ac79446f08b56c540a2150108ce6ab2cf03fb1ee6975b266214 \
      < events.json
  provider-agent check-event --json --stale 5m --file beats.jsonl   # one event per line, JSON out`

// maxCheckInput bounds what check-event reads.
const maxCheckInput = 64 << 20

// eventVerdict is one line of check-event --json.
type eventVerdict struct {
	Index   int            `json:"index"`
	ID      string         `json:"id,omitempty"`
	Kind    int            `json:"kind,omitempty"`
	Verdict string         `json:"verdict"`
	Reason  string         `json:"reason,omitempty"`
	Error   string         `json:"error,omitempty"`
	Reads   map[string]any `json:"reads,omitempty"`
}

func runCheckEvent(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("check-event", checkEventUsage, stdout)
	file := fs.String("file", "", "read the events from `FILE` instead of stdin (- is stdin)")
	contextFile := fs.String("context", "", "read the context from `FILE` (a vector file's \"context\" object); the flags override it")
	now := fs.String("now", "", "the receiver's clock: unix seconds or RFC 3339 (default: the current time)")
	var issuers, workloads, finished stringList
	self := fs.String("self", "", "the receiver's own `KEY` (hex or npub): a lease grant that names it neither as primary nor as standby is refused (not_named)")
	fs.Var(&issuers, "trusted-issuer", "a `KEY` (hex or npub) whose lease grants are accepted (repeatable)")
	fs.Var(&workloads, "workload", "a tracked workload, `ID=HOLDER[,MEMBER...]`: its current holder, then the lease's other providers (keys hex or npub; repeatable)")
	fs.Var(&finished, "finished", "a tracked workload `ID` that has finished (repeatable)")
	stale := fs.Duration("stale", 0, "how old a heartbeat may be (the lease's stale; default 180s)")
	maxSkew := fs.Duration("max-skew", 0, "how far created_at may lie ahead of --now (default 30s)")
	asJSON := fs.Bool("json", false, "print one JSON object per event ({\"index\", \"id\", \"kind\", \"verdict\", \"reason\", \"error\", \"reads\"})")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := checkContext(*contextFile, *now, *self, issuers, workloads, finished, *stale, *maxSkew)
	if err != nil {
		return err
	}
	events, err := readEvents(*file, stdin)
	if err != nil {
		return err
	}
	refused := 0
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for i, raw := range events {
		v, err := conformance.Judge(ctx, c, raw)
		if err != nil {
			return usagef("check-event: context: %v", err)
		}
		out := eventVerdict{Index: i + 1, ID: v.ID, Kind: v.Kind, Verdict: conformance.Accept, Reads: v.Reads}
		if !v.Accepted {
			refused++
			out.Verdict, out.Reason, out.Error = conformance.Refuse, string(v.Reason), refusalText(v.Err)
		}
		if *asJSON {
			if err := enc.Encode(out); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "event %d (%s): ", out.Index, describeEvent(out))
		if v.Accepted {
			fmt.Fprintln(stdout, "accepted")
		} else {
			fmt.Fprintf(stdout, "refused %s: %s\n", out.Reason, out.Error)
		}
	}
	if refused > 0 {
		return fmt.Errorf("check-event: %d of %d events refused", refused, len(events))
	}
	return nil
}

func describeEvent(v eventVerdict) string {
	id := v.ID
	if len(id) > 12 {
		id = id[:12]
	}
	if id == "" {
		return "not an event"
	}
	return fmt.Sprintf("kind %d, id %s", v.Kind, id)
}

// refusalText is a rejection's detail and cause, without the reason
// (printed beside it).
func refusalText(err error) string {
	var re *heartbeat.RejectError
	if !errors.As(err, &re) {
		return err.Error()
	}
	if re.Err != nil {
		return re.Detail + ": " + re.Err.Error()
	}
	return re.Detail
}

// checkContext builds the judging context: --context's, then the flags.
func checkContext(file, now, self string, issuers, workloads, finished []string, stale, maxSkew time.Duration) (conformance.Context, error) {
	c := conformance.Context{Now: time.Now().Unix(), Limits: conformance.DefaultLimits()}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return c, usagef("check-event: --context: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, usagef("check-event: --context %s: %v", file, err)
		}
	}
	if now != "" {
		t, err := parseNow(now)
		if err != nil {
			return c, usagef("check-event: --now %q: want unix seconds or RFC 3339", now)
		}
		c.Now = t
	}
	c.TrustedIssuers = append(c.TrustedIssuers, issuers...)
	if self != "" {
		c.Self = self
	}
	for _, w := range workloads {
		id, keys, ok := strings.Cut(w, "=")
		if !ok || id == "" || keys == "" {
			return c, usagef("check-event: --workload %q: want ID=HOLDER[,MEMBER...]", w)
		}
		members := strings.Split(keys, ",")
		c.Workloads = append(c.Workloads, conformance.Workload{ID: id, Holder: members[0], Members: members})
	}
	for _, id := range finished {
		found := false
		for i := range c.Workloads {
			if c.Workloads[i].ID == id {
				c.Workloads[i].Finished, found = true, true
			}
		}
		if !found {
			return c, usagef("check-event: --finished %s: not a --workload", id)
		}
	}
	if stale != 0 {
		c.Limits.StaleSeconds = int64(stale / time.Second)
	}
	if maxSkew != 0 {
		c.Limits.MaxSkewSeconds = int64(maxSkew / time.Second)
	}
	// Judge checks the keys and limits; check them here so a bad one is a
	// usage error before anything is read.
	if _, err := conformance.Judge(context.Background(), c, []byte("{}")); err != nil {
		return c, usagef("check-event: %v", err)
	}
	return c, nil
}

func parseNow(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, err
	}
	return t.Unix(), nil
}

// readEvents reads one event object, a JSON array of events, or a stream
// of events (one per line, or concatenated) from file or stdin. Each event
// is returned as its raw JSON, for the judge to parse as the agent does.
func readEvents(file string, stdin io.Reader) ([]json.RawMessage, error) {
	in, name := stdin, "stdin"
	if file != "" && file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usagef("check-event: %v", err)
		}
		defer f.Close()
		in, name = f, file
	}
	b, err := io.ReadAll(io.LimitReader(in, maxCheckInput+1))
	if err != nil {
		return nil, usagef("check-event: read %s: %v", name, err)
	}
	if len(b) > maxCheckInput {
		return nil, usagef("check-event: %s is over %d bytes", name, maxCheckInput)
	}
	var events []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var v json.RawMessage
		err := dec.Decode(&v)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, usagef("check-event: %s is not JSON (want an event, an array of events or one per line): %v", name, err)
		}
		if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '[' {
			var list []json.RawMessage
			if err := json.Unmarshal(t, &list); err != nil {
				return nil, usagef("check-event: %s: %v", name, err)
			}
			events = append(events, list...)
			continue
		}
		events = append(events, v)
	}
	if len(events) == 0 {
		return nil, usagef("check-event: no event in %s", name)
	}
	return events, nil
}
