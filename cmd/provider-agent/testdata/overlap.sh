#!/bin/bash
# overlap.sh BIN: how long a workload outlives `provider-agent run` killed
# with kill -9 (issue 16). Three dev-relays, one agent, a local lease whose
# workload is a pipeline plus a setsid'ed double fork, both appending
# "<time> <node> <epoch>" every 20 ms. Prints the time from just before the
# kill to the last line written (<= 0: nothing after the kill) and how many
# of the workload's processes still run. Gives up waiting after LIMIT s
# (default 30) and then kills the leftovers itself.
#
#   go build -o /tmp/provider-agent ./cmd/provider-agent
#   bash cmd/provider-agent/testdata/overlap.sh /tmp/provider-agent
set -u
BIN=$1
LIMIT=${LIMIT:-30}
BASE=${BASE_PORT:-17461}
W=$(mktemp -d)
ID=overlap-$$
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
LINE="(setsid sh -c 'while :; do echo \"\$(date +%s.%N) A-daemon \$PROVIDER_AGENT_EPOCH\" >> $OUT; sleep 0.02; done' &); while :; do echo \"\$(date +%s.%N) A \$PROVIDER_AGENT_EPOCH\"; sleep 0.02; done | cat >> $OUT"
"$BIN" workloads grant --data-dir "$W/data" "${relays[@]}" --quorum 2 --id $ID --command "$LINE" >/dev/null
"$BIN" run --data-dir "$W/data" "${relays[@]}" --quorum 2 --listen 127.0.0.1:0 >"$W/run.out" 2>"$W/run.err" &
agent=$!
for _ in $(seq 1 600); do [ -s "$OUT" ] && break; sleep 0.1; done
if [ ! -s "$OUT" ]; then
	echo "the workload never wrote"; tail "$W/run.err"; kill -9 $agent; kill "${pids[@]}"; exit 1
fi
sleep 1
killed=$(date +%s.%N)
kill -9 $agent
wait $agent 2>/dev/null
# Wait until no line came for 2 s, or LIMIT s passed.
while :; do
	now=$(date +%s.%N)
	last=$(tail -n1 "$OUT" | cut -d' ' -f1)
	awk -v n="$now" -v l="$last" -v k="$killed" -v lim="$LIMIT" 'BEGIN{exit !((n-l)>2 || (n-k)>lim)}' && break
	sleep 0.2
done
last=$(tail -n1 "$OUT" | cut -d' ' -f1)
awk -v l="$last" -v k="$killed" 'BEGIN{printf "last workload line %.3f s after kill -9 of the agent\n", l-k}'
ours() { grep -lz "^PROVIDER_AGENT_WORKLOAD_ID=$ID\$" /proc/[0-9]*/environ 2>/dev/null | sed 's|/proc/\([0-9]*\)/environ|\1|'; }
echo "workload processes still running: $(ours | wc -l)"
for p in $(ours); do kill -9 "$p" 2>/dev/null; done
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
rm -rf "$W"
