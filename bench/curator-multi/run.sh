#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/curator-multi/run.sh — Curator's runner of the peer benchmark's scenario m (leases of several
# permits at once; MultiPermit.java says what it measures). The runner contract's flags
# (--zk --proxy --ctrl --n --warm --dur --threads --herd --scen --tag); prints nothing unless --scen has m.
# Compiles into $CURATOR_MULTI_BUILD (default /tmp/peers/build/curator-multi) when needed, with the
# classpath and JVM flags of ../shared/peers/curator/run.sh (Debian's Curator 5.4.0 jars).
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
build=${CURATOR_MULTI_BUILD:-/tmp/peers/build/curator-multi}
J=/usr/share/java
CP="$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar:$J/guava.jar"
CP="$CP:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/slf4j-api.jar:$J/slf4j-nop.jar"
mkdir -p "$build"
if [[ ! -f "$build/MultiPermit.class" || "$here/MultiPermit.java" -nt "$build/MultiPermit.class" ]]; then
  echo "[curator-multi] compiling MultiPermit.java" >&2
  javac -nowarn -d "$build" -cp "$CP" "$here/MultiPermit.java"
fi
exec /usr/bin/java -Xmx1g -XX:+UseParallelGC -cp "$build:$CP" MultiPermit "$@"
