#!/bin/bash
# In the trial container: one trial of provider-agent-podman.service, the
# podman backend (backend.kind = "podman") under the unit, with the drop-in
# on stdin. The workload is the test image (localhost/bb:1) running a shell
# line that records, in its checkpoint directory, its uid, its effective
# capabilities and whether it sees the agent's data dir, then starts a
# second process beside its main one. Prints one line: did the unit start,
# did the container run (and what it recorded), errors, what was left after
# 'systemctl stop' (processes; container records), what was left after
# kill -9 of the agent and its supervisors together, and how many records
# of this workload there were once a restarted agent ran it again (the
# killed run's record is removed at start).
name=$1
unit=provider-agent-podman
dd=/var/lib/provider-agent/data
cfg=/etc/provider-agent/podman.toml
{ cat /etc/provider-agent/provider-agent.toml
  printf '[backend]\nkind = "podman"\npodman_run_args = ["--runtime", "runc", "--pids-limit", "-1"]\n'; } > $cfg
install -m 0644 /opt/units/$unit.service /etc/systemd/system/
mkdir -p /etc/systemd/system/$unit.service.d
cat > /etc/systemd/system/$unit.service.d/trial.conf
systemctl daemon-reload
for u in provider-agent $unit; do systemctl stop $u 2>/dev/null; systemctl reset-failed $u 2>/dev/null; done
pkill -KILL -f 'sleep 1000[78]' 2>/dev/null
podman rm --force --time 0 --filter label=provider-agent.workload=c1 >/dev/null 2>&1
rm -rf $dd/provider-agent.db* $dd/logs $dd/workloads /var/lib/provider-agent/workloads
line='{ echo uid=$(id -u); grep CapEff /proc/self/status | tr -d "\t"; ls /var/lib/provider-agent >/dev/null 2>&1 && echo agent-files=visible || echo agent-files=absent; } > $PROVIDER_AGENT_CHECKPOINT_DIR/probe; sleep 10007 & exec sleep 10008'
provider-agent workloads grant --config $cfg --id c1 --image localhost/bb:1 --command "$line" >/dev/null 2>&1 || { echo "$name | grant failed"; exit 0; }
records() { podman ps -a -q --filter label=provider-agent.workload=c1 | wc -l; }
running() { for _ in $(seq 1 150); do pgrep -f 'sleep 10008' >/dev/null && pgrep -f 'sleep 10007' >/dev/null && return 0; sleep 0.2; done; return 1; }
since=$(date +%s)
start=ok
timeout 60 systemctl start $unit 2>/dev/null || start="FAILED ($(systemctl show -p Result --value $unit))"
ran=no; running && ran=yes
# The probe's checkpoint directory: under /var/lib/provider-agent/workloads
# when isolated, under the data dir with isolation none.
probes=$(cat /var/lib/provider-agent/workloads/*/c1/checkpoint/1/probe $dd/workloads/*/c1/checkpoint/1/probe 2>/dev/null | tr '\n' ' ')
log=$(journalctl -u $unit --since=@$since -o cat 2>/dev/null)
iso=$(echo "$log" | grep -m1 -oE 'msg="workload isolation" isolation="[^"]*"|workloads are not isolated: [^"]{0,120}' | sed 's/msg="workload isolation" //')
err=$(echo "$log" | grep -E 'level=(ERROR|WARN)|^provider-agent: ' | grep -vE 'not isolated|running as|provider-agent: stopped' | head -2 | cut -c1-300 | tr '\n' ' ')
[ "$ran" = yes ] || err="$err $(tail -c 300 $dd/logs/c1.log 2>/dev/null | tr '\n' ' ')"
systemctl stop $unit
sleep 0.5
left="$(pgrep -f 'sleep 1000[78]' | wc -l) processes, $(records) records"
k9="-"; again="-"
if [ "$ran" = yes ]; then
  timeout 60 systemctl start $unit 2>/dev/null
  running
  main=$(systemctl show -p MainPID --value $unit)
  if [ "${main:-0}" -gt 0 ]; then # never kill -9 0: that is this process group
    kill -9 "$main" $(pgrep -f '^provider-agent-shim') 2>/dev/null # a supervisor may be gone already
    sleep 1.5
    k9="$(pgrep -f 'sleep 1000[78]' | wc -l) processes, $(records) records"
  else
    k9="not tried: the second start failed ($(systemctl show -p Result --value $unit): $(journalctl -u $unit -n 4 -o cat | cut -c1-200 | tr '\n' ' '))"
  fi
  # systemd restarts the agent (Restart=always), which removes the killed
  # run's record before it opens the database, then runs the workload again.
  running
  sleep 1
  again="$(records) records"
  systemctl stop $unit
  pkill -KILL -f 'sleep 1000[78]' 2>/dev/null
fi
echo "$name | start: $start | container ran: $ran (${probes:-no probes}) | ${iso:-no isolation line} | errors: ${err:-none} | left after stop: $left | left after kill -9 of agent and supervisors: $k9 | after the restart: $again"
