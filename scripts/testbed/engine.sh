#!/usr/bin/env bash
# The testbed's engine: a Docker Engine that answers and the Compose v2 plugin, installed from this
# machine's package sources when missing (`make test-testbed` runs this first). Idempotent: when
# `docker info` and `docker compose version` answer it changes nothing and takes about a second.
#   - no daemon binary: Debian's docker.io (apt)
#   - /etc/docker/daemon.json: bip and default-address-pools inside TESTBED_RANGE (10.214.0.0/16, a
#     range only the testbed uses), merged into what is there (other settings are kept)
#   - no daemon answering: dockerd started in the background (no systemd here), log in $DOCKERD_LOG
#   - no `docker compose`: the Compose v2 Go module built with `go install` (Go from apt when missing)
#     into /usr/local/lib/docker/cli-plugins/docker-compose
# The daemon it started keeps running until `engine.sh stop` (what `make test-testbed` runs at its end, also on
# failure, unless TESTBED_KEEP_ENGINE=1): that stops only a daemon this script started (its pid file), never one
# that was running before; images and the build cache stay on disk for the next run either way.
set -euo pipefail

COMPOSE_VERSION=${COMPOSE_VERSION:-v2.29.7}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/edgestream-dockerd.log}
DOCKERD_PID=/var/run/edgestream-dockerd.pid
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins
# bip (the default bridge) and the pools compose networks are cut from: both in 10.214.0.0/16
BIP=${TESTBED_BIP:-10.214.0.1/24}
POOL=${TESTBED_POOL:-10.214.128.0/17}

say() { echo "engine.sh: $*" >&2; }

if [ "${1:-}" = stop ]; then
    pid=$(cat "$DOCKERD_PID" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ]; then
        kill -TERM "$pid"
        for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$pid" 2>/dev/null; then say "dockerd $pid still up after 60 s: SIGKILL"; kill -KILL "$pid"; fi
        say "stopped the dockerd it started (pid $pid)"
    else
        say "no dockerd of its own to stop"
    fi
    rm -f "$DOCKERD_PID"
    exit 0
fi
apt_install() {
    [ "$(id -u)" = 0 ] || { say "installing $* needs root"; exit 1; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y --no-install-recommends "$@"; }
}

daemon_json() {
    # merge our two keys into daemon.json, keep every other setting; prints "changed" when it wrote
    mkdir -p /etc/docker
    python3 - "$BIP" "$POOL" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
bip, pool = sys.argv[1], sys.argv[2]
cfg = {}
if os.path.exists(path) and open(path).read().strip():
    cfg = json.load(open(path))
want = {"bip": bip, "default-address-pools": [{"base": pool, "size": 24}]}
if any(cfg.get(k) != v for k, v in want.items()):
    cfg.update(want)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print("changed")
PY
}

t0=$(date +%s)
if ! docker info >/dev/null 2>&1; then
    command -v dockerd >/dev/null || { say "no dockerd: installing docker.io from apt"; apt_install docker.io iptables; }
    daemon_json >/dev/null
    say "starting dockerd (log $DOCKERD_LOG)"
    # setsid: the daemon outlives this script and make's process group
    setsid dockerd --config-file /etc/docker/daemon.json >>"$DOCKERD_LOG" 2>&1 < /dev/null &
    echo $! > "$DOCKERD_PID"
    for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { say "dockerd did not answer in 60 s:"; tail -20 "$DOCKERD_LOG" >&2; exit 1; }
else
    # a daemon answers already: check (not change) that it uses our range
    if [ "$(daemon_json)" = changed ]; then
        say "wrote bip/default-address-pools to /etc/docker/daemon.json: they apply when dockerd restarts"
    fi
fi

if ! docker compose version >/dev/null 2>&1; then
    command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || { say "no go: installing golang-go from apt"; apt_install golang-go; }
    GO=$(command -v go || echo /usr/local/go/bin/go)
    say "building Compose $COMPOSE_VERSION with go install ($($GO version))"
    gobin=$(mktemp -d)
    trap 'rm -rf "$gobin"' EXIT
    GOBIN=$gobin CGO_ENABLED=0 "$GO" install \
        -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
        "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION"
    mkdir -p "$PLUGIN_DIR"
    install -m 0755 "$gobin/cmd" "$PLUGIN_DIR/docker-compose"
    docker compose version >/dev/null
fi
say "ready in $(( $(date +%s) - t0 )) s: engine $(docker version -f '{{.Server.Version}}'), $(docker compose version --short 2>/dev/null || docker compose version)"
