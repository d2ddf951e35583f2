#!/usr/bin/env bash
# Host-wide lock of the netboot scenario: its networks (10.77.0.0/24,
# 10.78.0.0/24), container names and tap device are global, so two runs (an
# engineer's and CI's) must not overlap, and one run's destroy must not remove
# what another run created.
#   lock.sh acquire OWNER [WAIT_S]  wait until the lock is free (or ours), take it
#   lock.sh mine OWNER              exit 0 if the lock is free or OWNER's
#   lock.sh release OWNER           drop it if it is OWNER's
# A lock older than an hour is stale (its run died without destroy).
set -euo pipefail

action=$1 owner=$2 wait=${3:-1800}
lock=/run/lock/junkyard-molecule-netboot
stale=3600

holder() { cat "$lock/owner" 2>/dev/null || true; }

case "$action" in
  acquire)
    for ((waited = 0; waited <= wait; waited += 5)); do
      if mkdir "$lock" 2>/dev/null; then
        echo "$owner" >"$lock/owner"
        exit 0
      fi
      [ "$(holder)" = "$owner" ] && exit 0
      if (( $(date +%s) - $(stat -c %Y "$lock" 2>/dev/null || date +%s) > stale )); then
        rm -rf "$lock"
        continue
      fi
      sleep 5
    done
    echo "lock.sh: $lock is held by $(holder) since $(stat -c %y "$lock")" >&2
    exit 1
    ;;
  mine)
    [ ! -d "$lock" ] || [ "$(holder)" = "$owner" ]
    ;;
  release)
    if [ "$(holder)" = "$owner" ]; then rm -rf "$lock"; fi
    ;;
  *)
    echo "usage: $0 acquire|mine|release OWNER [WAIT_S]" >&2
    exit 2
    ;;
esac
