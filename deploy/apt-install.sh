#!/usr/bin/env sh
# Installs Debian packages for make's set-up, waiting for a held apt or dpkg lock (a freshly booted machine runs its
# own apt jobs first) instead of failing on it; each failure says which step it was.
# Usage: deploy/apt-install.sh PACKAGE...   (REGROW_APT_LOCK_WAIT_S, default 300, bounds the wait)
set -u
wait_s=${REGROW_APT_LOCK_WAIT_S:-300}
export DEBIAN_FRONTEND=noninteractive
# apt-get itself waits this long for dpkg's frontend lock; the lists lock of `update` is waited for below.
lock="-o DPkg::Lock::Timeout=$wait_s"
deadline=$(( $(date +%s) + wait_s ))
until out=$(apt-get update -qq $lock 2>&1); do
  if ! printf '%s' "$out" | grep -qi "lock" || [ "$(date +%s)" -ge "$deadline" ]; then
    printf '%s\n' "$out" >&2
    echo "apt-install: 'apt-get update' failed (above) while installing $*: fix the machine's apt sources, or run it by hand and retry" >&2
    exit 1
  fi
  echo "apt-install: the apt lists are locked by another apt run; waiting (up to ${wait_s}s in all)" >&2
  sleep 3
done
# shellcheck disable=SC2086
if ! apt-get install -y -qq $lock "$@"; then
  echo "apt-install: 'apt-get install $*' failed (above): see its message, or run it by hand and retry" >&2
  exit 1
fi
