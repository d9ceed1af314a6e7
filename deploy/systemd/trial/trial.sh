#!/bin/bash
# In the trial container: one trial of provider-agent.service with the
# drop-in on stdin; prints one line (see run-trials).
name=$1
unit=provider-agent
dd=/var/lib/provider-agent/data
export PROVIDER_AGENT_AGENT_DATA_DIR=$dd
mkdir -p /etc/systemd/system/$unit.service.d
cat > /etc/systemd/system/$unit.service.d/trial.conf
systemctl daemon-reload
systemctl stop $unit 2>/dev/null; systemctl reset-failed $unit 2>/dev/null
pkill -KILL -f 'sleep 1000[78]' 2>/dev/null
user=$(systemctl show -p User --value $unit); user=${user:-root}
grant() { # the workload's command line
  rm -rf $dd/provider-agent.db* $dd/logs $dd/probe
  chown -R "$user:" $dd
  runuser -u "$user" -- provider-agent workloads grant --config /etc/provider-agent/provider-agent.toml --id w1 --command "$1" >/dev/null 2>&1
}
grant "$(cat /opt/trial/probe.sh)" || { echo "$name | grant failed"; exit 0; }
since=$(date +%s)
start=ok
timeout 60 systemctl start $unit 2>/dev/null || start="FAILED ($(systemctl show -p Result --value $unit))"
ran=no
for _ in $(seq 1 100); do pgrep -f 'sleep 10008' >/dev/null && pgrep -f 'sleep 10007' >/dev/null && { ran=yes; break; }; sleep 0.2; done
log=$(journalctl -u $unit --since=@$since -o cat 2>/dev/null)
contain=$(echo "$log" | grep -m1 -oE 'msg="workload containment" containment="[^"]*"|workloads are not fully contained: [^"]{0,200}' | sed 's/msg="workload containment" //')
err=$(echo "$log" | grep -E 'level=(ERROR|WARN)|^provider-agent: ' | grep -vE 'not fully contained|running as|provider-agent: stopped' | head -2 | cut -c1-300 | tr '\n' ' ')
probes=$(tr '\n' ' ' < $dd/probe 2>/dev/null)
systemctl stop $unit
sleep 0.5
left=$(pgrep -f 'sleep 1000[78]' | wc -l)
# kill -9 of the agent and its supervisors together: only the workload's
# PID namespace, or systemd's KillMode, takes down what escaped.
k9="-"
if [ "$ran" = yes ]; then
  grant 'setsid env -i /bin/sleep 10007 & exec /bin/sleep 10008'
  timeout 60 systemctl start $unit 2>/dev/null
  for _ in $(seq 1 100); do pgrep -f 'sleep 10007' >/dev/null && break; sleep 0.2; done
  kill -9 $(systemctl show -p MainPID --value $unit) $(pgrep -f '^provider-agent-shim')
  sleep 1.5
  k9=$(pgrep -f 'sleep 1000[78]' | wc -l)
  systemctl stop $unit
  pkill -KILL -f 'sleep 1000[78]' 2>/dev/null
fi
echo "$name | start: $start | workload ran: $ran (${probes:-no probes}) | ${contain:-no containment line} | errors: ${err:-none} | left after stop: $left | left after kill -9 of agent and supervisors: $k9"
