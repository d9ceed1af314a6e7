#!/bin/bash
# In the trial container: the agent, three dev relays, a config, a key; the
# unit; a user for unprivileged.conf; podman's vfs storage and a busybox image.
set -e
install -m 0755 /opt/bin/provider-agent /usr/local/bin/provider-agent
id provider-agent >/dev/null 2>&1 || useradd --system --home-dir /var/lib/provider-agent --no-create-home --shell /usr/sbin/nologin provider-agent
for p in 7447 7448 7449; do systemd-run --unit=relay$p /usr/local/bin/provider-agent dev-relay --listen 127.0.0.1:$p >/dev/null 2>&1; done
mkdir -p /etc/provider-agent /home/someone && echo hi > /home/someone/f
cat > /etc/provider-agent/provider-agent.toml <<EOT
[agent]
data_dir = "/var/lib/provider-agent/data"
[lease]
relays = ["ws://127.0.0.1:7447", "ws://127.0.0.1:7448", "ws://127.0.0.1:7449"]
quorum = 2
EOT
install -m 0644 /opt/units/provider-agent.service /etc/systemd/system/
systemctl daemon-reload
install -d -m 0755 /var/lib/provider-agent
provider-agent keygen --out /var/lib/provider-agent/data/identity.key >/dev/null
mkdir -p /etc/containers
printf '[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\ngraphroot = "/var/lib/containers/storage"\n' > /etc/containers/storage.conf
printf '[containers]\nkeyring = false\n' > /etc/containers/containers.conf
d=$(mktemp -d); chmod 755 $d; mkdir -p $d/bin $d/etc $d/tmp $d/proc $d/sys $d/dev; cp "$(readlink -f "$(command -v busybox)")" $d/bin/busybox
for a in sh true sleep echo cat id; do ln -s busybox $d/bin/$a; done
echo "root:x:0:0:root:/:/bin/sh" > $d/etc/passwd; echo "root:x:0:" > $d/etc/group
tar -C $d -cf /root/bb.tar . && podman import /root/bb.tar localhost/bb:1 >/dev/null 2>&1
