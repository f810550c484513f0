#!/bin/sh
# Build the scenarios against each RocketMQ the pom pins (`make rocketmq-java`): Maven
# fetches the jars into its local repository the first time. Where Maven Central cannot
# be reached, the reason is left in target/unreachable.txt and the tests skip with it;
# any other failure (a compile error) fails the build.
set -u
cd "$(dirname "$0")"
mkdir -p target
rm -f target/unreachable.txt target/.built
for profile in rocketmq-5 rocketmq-4; do
    if ! mvn -B -q -P "$profile" compile > "target/$profile.log" 2>&1; then
        if grep -Eiq "Could not (resolve|transfer)|UnknownHost|Unknown host|Network is unreachable|Connection refused|offline mode" \
                "target/$profile.log"; then
            grep -Eim1 "Could not (resolve|transfer)|UnknownHost|Unknown host|Network is unreachable|Connection refused|offline mode" \
                "target/$profile.log" > target/unreachable.txt
            echo "RocketMQ's Java client not built (its tests skip): $(cat target/unreachable.txt)" >&2
            exit 0
        fi
        cat "target/$profile.log" >&2
        exit 1
    fi
done
touch target/.built
