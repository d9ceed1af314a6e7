#!/bin/bash
# In the trial container: podman-run.sh NAME none|net PROPERTIES...: runs
# podman run as the podman backend issues it (its own user, no capabilities,
# no new privileges) in a transient service with PROPERTIES; prints one line.
name=$1; net=$2; shift 2
props=()
for p in "$@"; do props+=(-p "$p"); done
u=prun-$RANDOM
mkdir -p /var/lib/prun; out=/var/lib/prun/$u.out; props+=(-p ReadWritePaths=/var/lib/prun)
netarg="--network none"; [ "$net" = net ] && netarg=""
systemd-run -q --unit=$u "${props[@]}" sh -c "podman run --runtime runc --pids-limit -1 $netarg --user 65534:65534 --cap-drop all --security-opt no-new-privileges --rm localhost/bb:1 /bin/echo container-ran > $out 2>&1; echo rc=\$? >> $out"
for i in $(seq 1 100); do grep -q '^rc=' $out 2>/dev/null && break; sleep 0.3; done
res=$(grep -q container-ran $out && echo OK || echo "FAILED: $(grep -v '^rc=' $out | tail -2 | tr '\n' ' ' | cut -c1-260)")
echo "$name | $res"
