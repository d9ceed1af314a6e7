#!/bin/bash
# In the trial container (run-trials --package DEB): install the Debian
# package as on a fresh host (dpkg -i, its maintainer scripts), follow
# "The Debian package" in docs/deployment.md (relays in the config, a key,
# doctor, systemctl start), grant a workload, then remove the package.
# Prints one line: "package | <step>: <result> | ...".
set -u
deb=$1
line="package"
add() { line="$line | $*"; }
done_() { echo "$line"; exit 0; }
if ! dpkg -i "$deb" >/tmp/dpkg.log 2>&1; then add "dpkg -i: FAILED: $(tail -3 /tmp/dpkg.log | tr '\n' ' ')"; done_; fi
add "dpkg -i: ok"
add "user: $(getent passwd provider-agent | cut -d: -f1,6,7)"
add "dirs: $(stat -c '%n %a %U' /var/lib/provider-agent /var/lib/provider-agent/data /var/lib/provider-agent/workloads | tr '\n' ' ')"
add "unit: $(systemctl show -p FragmentPath --value provider-agent)"
cfg=/etc/provider-agent/provider-agent.toml
for p in 7447 7448 7449; do systemd-run --unit=relay$p /usr/bin/provider-agent dev-relay --listen 127.0.0.1:$p >/dev/null 2>&1; done
sed -i 's|^relays = .*|relays = ["ws://127.0.0.1:7447", "ws://127.0.0.1:7448", "ws://127.0.0.1:7449"]|' $cfg
provider-agent keygen --out /var/lib/provider-agent/data/identity.key >/dev/null
if provider-agent doctor --config $cfg >/tmp/doctor.log 2>&1; then add "doctor: ok"; else add "doctor: FAILED: $(grep FAIL /tmp/doctor.log | tr '\n' ' ')"; fi
if timeout 90 systemctl start provider-agent; then add "start: $(systemctl is-active provider-agent)"; else
	add "start: FAILED ($(systemctl show -p Result --value provider-agent)): $(journalctl -u provider-agent -n 5 -o cat | tr '\n' ' ')"; done_; fi
add "status: $(provider-agent status --config $cfg 2>&1 | head -1)"
provider-agent workloads grant --config $cfg --id pkg-1 --command 'sleep 7415' >/dev/null 2>&1
ran=no
for _ in $(seq 1 100); do pid=$(pgrep -f '^(/bin/sh -c )?sleep 7415$' | head -1); [ -n "$pid" ] && { ran="uid $(stat -c %u /proc/$pid)"; break; }; sleep 0.2; done
add "workload: $ran"
add "version: $(provider-agent version)"
systemctl stop provider-agent
if dpkg -r provider-agent >/tmp/dpkg-r.log 2>&1; then add "dpkg -r: ok, key kept: $(test -f /var/lib/provider-agent/data/identity.key && echo yes || echo no)"; else
	add "dpkg -r: FAILED: $(tail -2 /tmp/dpkg-r.log | tr '\n' ' ')"; fi
done_
