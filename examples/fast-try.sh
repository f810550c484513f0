#!/usr/bin/env bash
# Try a controller-mode deployment on this machine, as processes:
# a name server, three controllers and broker group broker-a of three
# replicas, all from the TOML files beside this script.
#
#   examples/fast-try.sh start          # start them all, create topic TopicTest, show its route
#   examples/fast-try.sh status         # each node's pid, and which broker is the master
#   examples/fast-try.sh start NODE     # start one node again (e.g. broker-a-0 after a kill)
#   examples/fast-try.sh stop [NODE]    # stop them all, or one (SIGTERM)
#
# NODE is a file name without .toml: namesrv-1, controller-1 to -3, broker-a-0 to -2.
# TRIOMQ names the triomq command (default: .venv/bin/triomq, else triomq on
# PATH). Stores go under data/controller/, pid files and logs under data/run/
# (NODE.pid, NODE.log), in the current directory.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DEPLOYMENT="$HERE/controller"
TRIOMQ="${TRIOMQ:-}"
if [ -z "$TRIOMQ" ]; then
    if [ -x .venv/bin/triomq ]; then TRIOMQ=.venv/bin/triomq; else TRIOMQ=triomq; fi
fi
RUN=data/run
NODES="namesrv-1 controller-1 controller-2 controller-3 broker-a-0 broker-a-1 broker-a-2"
NAMESRV="$(sed -n 's|^listen = "tcp://\(.*\)"|\1|p' "$DEPLOYMENT/namesrv-1.toml")"

config_of() {
    local config="$DEPLOYMENT/$1.toml"
    if [ ! -e "$config" ]; then
        echo "no node $1 (one of: $NODES)" >&2
        exit 2
    fi
    echo "$config"
}

running() {  # whether the node's pid file names a live process
    [ -e "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null
}

start_node() {
    local config role
    config="$(config_of "$1")"
    if running "$1"; then
        echo "$1 is running already (pid $(cat "$RUN/$1.pid"))"
        return
    fi
    role="$(sed -n 's|^role = "\(.*\)"|\1|p' "$config")"
    mkdir -p "$RUN"
    "$TRIOMQ" "$role" --config "$config" >> "$RUN/$1.log" 2>&1 &
    echo $! > "$RUN/$1.pid"
    echo "started $role $1 (pid $!, log $RUN/$1.log)"
}

stop_node() {
    config_of "$1" > /dev/null
    if running "$1"; then
        kill "$(cat "$RUN/$1.pid")"
        echo "stopped $1 (pid $(cat "$RUN/$1.pid"))"
    fi
    rm -f "$RUN/$1.pid"
}

start_all() {
    for node in $NODES; do start_node "$node"; done
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

status() {
    # The name server routes each group's master as broker id 0.
    local routes master address pid state broker_id
    routes="$("$TRIOMQ" admin cluster-list -n "$NAMESRV" 2>/dev/null || true)"
    master="$(awk '$2 == "broker-a" && $3 == "0" {print $4}' <<< "$routes")"
    printf '%-13s %-8s %-8s %s\n' node pid state role
    for node in $NODES; do
        address="$(sed -n 's|^listen = "tcp://\(.*\)"|\1|p' "$DEPLOYMENT/$node.toml")"
        pid="$(cat "$RUN/$node.pid" 2>/dev/null || echo -)"
        if running "$node"; then state=running; else state=stopped; fi
        case "$node" in
            broker-*) broker_id="$(awk -v a="$address" '$2 == "broker-a" && $4 == a {print $3}' \
                                   <<< "$routes")"
                      case "$broker_id" in
                          0) role="broker-a master ($address)" ;;
                          "") role="broker-a, not routed ($address)" ;;
                          *) role="broker-a slave ($address)" ;;
                      esac ;;
            *) role="$(sed -n 's|^role = "\(.*\)"|\1|p' "$DEPLOYMENT/$node.toml") ($address)" ;;
        esac
        printf '%-13s %-8s %-8s %s\n' "$node" "$pid" "$state" "$role"
    done
    if [ -z "$master" ]; then
        echo "broker-a has no master routed by the name server $NAMESRV yet"
    fi
}

case "${1:-}" in
    start) if [ -n "${2:-}" ]; then start_node "$2"; else start_all; fi ;;
    stop) if [ -n "${2:-}" ]; then stop_node "$2"
          else for node in $NODES; do stop_node "$node"; done; echo "stopped"; fi ;;
    status) status ;;
    *) echo "usage: $0 start [NODE] | stop [NODE] | status" >&2; exit 2 ;;
esac
