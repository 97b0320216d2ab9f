#!/usr/bin/env bash
# The two helper processes `docker compose` needs on a podman host without systemd:
#   * `podman system service`: the Docker API on DIR/podman.sock (DOCKER_HOST) for Compose v2;
#   * deploy/podman/health_ticker.py: runs the healthchecks (systemd timers would, elsewhere).
#
#   deploy/podman/service.sh start [DIR]    # idempotent; pids in DIR/service.pid, DIR/ticker.pid
#   deploy/podman/service.sh stop  [DIR]    # stops both (by pid); containers keep running
#   deploy/podman/service.sh env   [DIR]    # prints the exports `docker compose` needs
#   deploy/podman/service.sh status [DIR]
#
# DIR as for deploy/podman/setup.sh (default /var/lib/royalefleet-podman).
set -euo pipefail
cmd=${1:?usage: service.sh start|stop|env|status [DIR]}
DIR=${2:-${ROYALEFLEET_PODMAN_DIR:-/var/lib/royalefleet-podman}}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF="$DIR/containers.conf"

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() {  # stop_pid PIDFILE: TERM, then KILL after 10 s
  local f=$1 pid
  [ -s "$f" ] || { rm -f "$f"; return 0; }
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

case $cmd in
  env)
    echo "export CONTAINERS_CONF='$DIR/containers.conf' DOCKER_CONFIG='$DIR/docker'" \
         "DOCKER_HOST='unix://$DIR/podman.sock' DOCKER_BUILDKIT=0 COMPOSE_BAKE=false"
    ;;
  start)
    [ -f "$CONTAINERS_CONF" ] || { echo "service.sh: no $CONTAINERS_CONF; run deploy/podman/setup.sh $DIR" >&2; exit 1; }
    if ! alive "$DIR/service.pid"; then
      rm -f "$DIR/podman.sock"
      # setsid: the service outlives the shell that started it (and its Ctrl-C).
      setsid podman system service --time=0 "unix://$DIR/podman.sock" >> "$DIR/service.log" 2>&1 < /dev/null &
      echo $! > "$DIR/service.pid"
      for _ in $(seq 100); do [ -S "$DIR/podman.sock" ] && break; sleep 0.1; done
      [ -S "$DIR/podman.sock" ] || { echo "service.sh: podman system service did not start ($DIR/service.log)" >&2; exit 1; }
    fi
    if ! alive "$DIR/ticker.pid"; then
      setsid python3 "$HERE/health_ticker.py" --while-alive "$(cat "$DIR/service.pid")" \
        >> "$DIR/ticker.log" 2>&1 < /dev/null &
      echo $! > "$DIR/ticker.pid"
    fi
    echo "service.sh: API on unix://$DIR/podman.sock (pid $(cat "$DIR/service.pid")), health ticker pid $(cat "$DIR/ticker.pid")"
    ;;
  stop)
    stop_pid "$DIR/ticker.pid"
    stop_pid "$DIR/service.pid"
    rm -f "$DIR/podman.sock"
    ;;
  status)
    alive "$DIR/service.pid" && echo "API service: pid $(cat "$DIR/service.pid")" || echo "API service: stopped"
    alive "$DIR/ticker.pid" && echo "health ticker: pid $(cat "$DIR/ticker.pid")" || echo "health ticker: stopped"
    ;;
  *) echo "usage: service.sh start|stop|env|status [DIR]" >&2; exit 2 ;;
esac
