#!/bin/sh
# provider-agent's prerm (deploy/package): a removal stops the agent (it
# stops its workloads first); an upgrade leaves it running until postinst
# restarts it.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop provider-agent provider-agent-podman >/dev/null 2>&1 || true
fi
exit 0
