#!/usr/bin/env bash
# Runs COMMAND with a /dev/shm of its own (a private mount namespace and a fresh tmpfs), so that
# its shared-memory entries and another process's never meet.
#   scenarios/own_dev_shm.sh COMMAND [ARGS...]
# Needs what `unshare --mount` needs (root, or CAP_SYS_ADMIN); fails, saying so, without it.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: own_dev_shm.sh COMMAND [ARGS...]" >&2
  exit 2
fi
exec unshare --mount --propagation private -- sh -c 'mount -t tmpfs -o mode=1777,size=50% tmpfs /dev/shm && exec "$@"' own_dev_shm "$@"
