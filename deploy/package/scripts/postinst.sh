#!/bin/sh
# provider-agent's postinst (deploy/package): the system user of
# deploy/systemd/unprivileged.conf, and the directories the units and the
# agent's defaults use, with the modes docs/deployment.md gives: the
# parent searchable (workload users reach workloads/ beside the data dir),
# the data dir private (the key file and the database), the workloads'
# directory searchable but not listable. The service is not enabled: set
# lease.relays (and agent.trusted_issuers) in
# /etc/provider-agent/provider-agent.toml and make a key first.
set -e
case "$1" in
configure)
	if ! getent passwd provider-agent >/dev/null; then
		if command -v adduser >/dev/null 2>&1; then
			adduser --system --group --home /var/lib/provider-agent --no-create-home --quiet provider-agent
		else
			useradd --system --user-group --home-dir /var/lib/provider-agent --no-create-home \
				--shell /usr/sbin/nologin provider-agent
		fi
	fi
	install -d -m 0755 -o root -g root /var/lib/provider-agent
	install -d -m 0700 -o root -g root /var/lib/provider-agent/data
	install -d -m 0711 -o root -g root /var/lib/provider-agent/workloads
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload >/dev/null 2>&1 || true
		# An upgrade restarts a running agent on the new binary.
		for u in provider-agent provider-agent-podman; do
			if systemctl is-active --quiet "$u"; then
				systemctl restart "$u" || true
			fi
		done
	fi
	;;
esac
exit 0
