#!/usr/bin/env bash
# The BASE_IMAGE for sites that reach no container registry: Debian trixie (Python 3.13, venv)
# made with debootstrap and imported into podman. The Dockerfile's default,
# docker.io/library/python:3.12-slim-bookworm, is what a normal Docker host uses instead.
#
#   deploy/podman/make-base-image.sh [IMAGE]      # default localhost/python-base:trixie
#   BASE_IMAGE=localhost/python-base:trixie docker compose build
#
# Root only (debootstrap, rootful podman). Idempotent: an existing IMAGE is kept unless
# REBUILD=1. The host's extra certificate authorities (/usr/local/share/ca-certificates/*.crt,
# e.g. a TLS-intercepting egress proxy's) are trusted inside, so `pip install` in a build works
# wherever it works on the host. DEBIAN_MIRROR picks the mirror (default deb.debian.org).
set -euo pipefail

IMAGE=${1:-localhost/python-base:trixie}
SUITE=${SUITE:-trixie}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "base image: $*"; }
[ "$(id -u)" = 0 ] || { say "run as root (debootstrap, podman import)"; exit 1; }
for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || { say "$tool is missing (deploy/podman/setup.sh installs it)"; exit 1; }
done

if [ "${REBUILD:-0}" != 1 ] && podman image exists "$IMAGE"; then
  say "$IMAGE exists (REBUILD=1 makes it again)"
  exit 0
fi

work=$(mktemp -d /var/tmp/royalefleet-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
t0=$SECONDS
# A mirror hiccup (a dropped connection, a mirror mid-sync) fails debootstrap outright; it is
# retried from scratch twice, 20 s apart, before the build gives up.
for attempt in 1 2 3; do
  say "debootstrap $SUITE from $MIRROR (attempt $attempt of 3)"
  rm -rf "$rootfs"
  if debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
       "$SUITE" "$rootfs" "$MIRROR" > "$work/debootstrap.log" 2>&1; then
    break
  fi
  tail -n 30 "$work/debootstrap.log"
  [ "$attempt" -lt 3 ] || { say "debootstrap failed 3 times"; exit 1; }
  sleep 20
done

shopt -s nullglob
extra=(/usr/local/share/ca-certificates/*.crt)
if [ ${#extra[@]} -gt 0 ]; then
  cp "${extra[@]}" "$rootfs/usr/local/share/ca-certificates/"
  chroot "$rootfs" update-ca-certificates > /dev/null 2>&1
  say "trusts the host's extra CAs: ${extra[*]##*/}"
fi
chroot "$rootfs" python3 -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 12), sys.version'
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log \
       "$rootfs"/etc/hostname "$rootfs"/etc/resolv.conf

# podman import leaves the config empty: give it a PATH, a locale and a command.
tar -C "$rootfs" --numeric-owner -c . | podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' - "$IMAGE" > /dev/null
say "$IMAGE ($(podman run --rm "$IMAGE" python3 --version)) in $((SECONDS - t0)) s"
