#!/usr/bin/env bash
# Try a controller-mode deployment on this machine, as processes:
# a name server, three controllers and broker group broker-a of three
# replicas, all from the TOML files beside this script.
#
#   examples/fast-try.sh start   # start them, create topic TopicTest, show its route
#   examples/fast-try.sh stop    # stop them (SIGTERM)
#
# TRIOMQ names the triomq command (default: .venv/bin/triomq, else triomq on
# PATH). Stores and logs go under data/ in the current directory.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DEPLOYMENT="$HERE/controller"
TRIOMQ="${TRIOMQ:-}"
if [ -z "$TRIOMQ" ]; then
    if [ -x .venv/bin/triomq ]; then TRIOMQ=.venv/bin/triomq; else TRIOMQ=triomq; fi
fi
RUN=data/run
NAMESRV="$(sed -n 's|^listen = "tcp://\(.*\)"|\1|p' "$DEPLOYMENT/namesrv-1.toml")"

start() {
    mkdir -p "$RUN"
    for config in namesrv-1 controller-1 controller-2 controller-3 \
                  broker-a-0 broker-a-1 broker-a-2; do
        role="$(sed -n 's|^role = "\(.*\)"|\1|p' "$DEPLOYMENT/$config.toml")"
        "$TRIOMQ" "$role" --config "$DEPLOYMENT/$config.toml" > "$RUN/$config.log" 2>&1 &
        echo $! > "$RUN/$config.pid"
        echo "started $role $config (pid $!, log $RUN/$config.log)"
    done
    echo "waiting for broker-a's master to register with the name server $NAMESRV ..."
    for _ in $(seq 1 150); do
        if "$TRIOMQ" admin cluster-list -n "$NAMESRV" 2>/dev/null \
                | grep -Eq "^DefaultCluster +broker-a +0 "; then
            break
        fi
        sleep 0.2
    done
    "$TRIOMQ" admin cluster-list -n "$NAMESRV"
    echo
    "$TRIOMQ" admin update-topic -n "$NAMESRV" -c DefaultCluster -t TopicTest -r 4 -w 4
    echo
    "$TRIOMQ" admin topic-route -n "$NAMESRV" -t TopicTest
}

stop() {
    for pid_file in "$RUN"/*.pid; do
        [ -e "$pid_file" ] || continue
        kill "$(cat "$pid_file")" 2>/dev/null || true
        rm -f "$pid_file"
    done
    echo "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
