#!/bin/sh
# provider-agent's postrm (deploy/package). A purge removes the config
# and the system user but never /var/lib/provider-agent: it holds the
# node's identity key and database (see "Backup and restore" in
# docs/operations.md); remove it by hand once they are backed up.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
	rm -rf /etc/provider-agent
	if getent passwd provider-agent >/dev/null && command -v deluser >/dev/null 2>&1; then
		deluser --system --quiet provider-agent >/dev/null 2>&1 || true
	fi
fi
exit 0
