#!/bin/bash
# scrubbed.sh BIN {shim|both} [CONTAINMENT]: how long a workload daemon that
# clears its environment and leaves its supervisor's process tree
# (env -i ... setsid) keeps writing after kill -9 of its supervisor alone
# (shim) or of the agent and its supervisor together (both: the agent is
# SIGSTOPped first, so that neither can act on the other's death). Three
# dev-relays, one agent, a local lease. The daemon appends
# "<time> <its pid>" every 20 ms. Prints the time from the kill to the old
# daemon's last line (<= 0: nothing after the kill) and, for "shim", how
# many distinct daemons wrote in the last 2 s once the agent respawned the
# workload; for "both", what a restarted run killed and how many daemons
# write after it started. CONTAINMENT (auto, pidns, cgroup, none), when
# given, is passed as PROVIDER_AGENT_BACKEND_CONTAINMENT (an agent that
# has no such setting refuses the variable: leave it out for one). Gives up
# waiting after LIMIT s (default 20) and then kills the leftovers itself.
#
#   go build -o /tmp/provider-agent ./cmd/provider-agent
#   bash cmd/provider-agent/testdata/scrubbed.sh /tmp/provider-agent shim
#   bash cmd/provider-agent/testdata/scrubbed.sh /tmp/provider-agent both
set -u
BIN=$1
MODE=$2
LIMIT=${LIMIT:-20}
BASE=${BASE_PORT:-17481}
W=$(mktemp -d)
ID=scrubbed-$$
export PROVIDER_AGENT_BACKEND_STOP_GRACE=2s
[ -n "${3:-}" ] && export PROVIDER_AGENT_BACKEND_CONTAINMENT=$3
relays=()
pids=()
for p in $BASE $((BASE + 1)) $((BASE + 2)); do
	"$BIN" dev-relay --listen 127.0.0.1:$p >/dev/null 2>&1 &
	pids+=($!)
	relays+=(--relay ws://127.0.0.1:$p)
done
mkdir -m 700 "$W/data"
"$BIN" keygen --out "$W/data/identity.key" >/dev/null
OUT=$W/out.txt
SHIM=$W/shim
# The top shell records its parent (the supervisor) as the kernel's /proc
# names it; the daemon records its own pid the same way ($$ is a pid inside
# the workload's PID namespace, where there is one).
LINE="read -r _ _ _ pp _ </proc/self/stat; echo \$pp > $SHIM; env -i PATH=/usr/bin:/bin setsid sh -c 'read -r p _ </proc/self/stat; while :; do echo \"\$(date +%s.%N) \$p\" >> $OUT; sleep 0.02; done' & while :; do sleep 1; done"
"$BIN" workloads grant --data-dir "$W/data" "${relays[@]}" --quorum 2 --id $ID --command "$LINE" >/dev/null
start_agent() {
	"$BIN" run --data-dir "$W/data" "${relays[@]}" --quorum 2 --listen 127.0.0.1:0 >>"$W/run.out" 2>>"$W/run.err$1" &
	agent=$!
}
start_agent 1
for _ in $(seq 1 600); do [ -s "$OUT" ] && break; sleep 0.1; done
if [ ! -s "$OUT" ]; then
	echo "the workload never wrote"; tail "$W/run.err1"; kill -9 $agent; kill "${pids[@]}"; exit 1
fi
# Past the agent's first periodic save (5 s), so a restarted run restores
# the workload (a run killed earlier forgets it: issue 25 item 2).
sleep ${SETTLE:-6}
first=$(tail -n1 "$OUT" | cut -d' ' -f2)
shim=$(cat "$SHIM")
if [ "$MODE" = both ]; then
	# Together, so that neither can act: the agent stopped first (its
	# threads take a moment to stop), then the supervisor, then the agent.
	kill -STOP $agent
	sleep 0.1
	killed=$(date +%s.%N)
	kill -9 $shim $agent
	wait $agent 2>/dev/null
else
	killed=$(date +%s.%N)
	kill -9 $shim
fi
# The old daemon's last line: wait until it wrote nothing for 2 s, or LIMIT s.
lastof() { grep " $first\$" "$OUT" | tail -n1 | cut -d' ' -f1; }
while :; do
	now=$(date +%s.%N)
	awk -v n="$now" -v l="$(lastof)" -v k="$killed" -v lim="$LIMIT" 'BEGIN{exit !((n-l)>2 || (n-k)>lim)}' && break
	sleep 0.2
done
awk -v l="$(lastof)" -v k="$killed" -v m="$MODE" 'BEGIN{printf "kill -9 of %s: the old daemon wrote its last line %.3f s after the kill\n", m=="both"?"agent and supervisor":"the supervisor", l-k}'
if [ "$MODE" = both ]; then
	start_agent 2
fi
# Writers in the last 2 s once a new daemon writes (bounded).
for _ in $(seq 1 900); do
	grep -qv " $first\$" "$OUT" && break
	sleep 0.1
done
sleep 3
now=$(date +%s.%N)
writers=$(awk -v n="$now" '$1 > n-2 {print $2}' "$OUT" | sort -u | wc -l)
old=$(awk -v n="$now" -v f="$first" '$1 > n-2 && $2 == f' "$OUT" | wc -l)
echo "daemons writing in the last 2 s: $writers (the old one: $([ "$old" -gt 0 ] && echo yes || echo no))"
if [ "$MODE" = both ]; then
	echo "restarted run's lines about leftovers: $(grep -c 'leftover' "$W/run.err2")"
fi
kill -9 $agent 2>/dev/null
wait $agent 2>/dev/null
sleep 0.5
# Whatever still writes is a leftover: kill it by the pids it printed.
for p in $(awk '{print $2}' "$OUT" | sort -u); do
	grep -qz "^PATH=/usr/bin:/bin\$" /proc/$p/environ 2>/dev/null && kill -9 "$p" 2>/dev/null
done
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
[ -n "${KEEP:-}" ] && echo "kept $W" || rm -rf "$W"
