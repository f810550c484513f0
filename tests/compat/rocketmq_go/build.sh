#!/bin/sh
# Build bin/rocketmqgo with RocketMQ's Go client at the versions go.mod and go.sum pin
# (`make rocketmq-go`): the Go module proxy serves the modules the first time. Where it
# cannot be reached, the reason is left in bin/unreachable.txt and the tests skip with
# it; any other failure (a compile error) fails the build.
set -u
cd "$(dirname "$0")"
mkdir -p bin
rm -f bin/unreachable.txt
UNREACHABLE="dial tcp|no such host|connection refused|network is unreachable|i/o timeout|TLS handshake|GOPROXY|GOFLAGS=-mod=mod"
if ! go build -mod=readonly -o bin/rocketmqgo . > bin/build.log 2>&1; then
    if grep -Eiq "$UNREACHABLE" bin/build.log; then
        grep -Eim1 "$UNREACHABLE" bin/build.log > bin/unreachable.txt
        echo "RocketMQ's Go client not built (its tests skip): $(cat bin/unreachable.txt)" >&2
        exit 0
    fi
    cat bin/build.log >&2
    exit 1
fi
