#!/usr/bin/env bash
# make interop-librdkafka: librdkafka's KIP-932 share consumer (C, >= 2.15)
# against sharelog's Kafka listener. Not part of CI (it builds librdkafka,
# about 5 minutes on 2 cores the first time).
#
# librdkafka 2.15 is not packaged by the distribution here; its source comes
# bundled in the npm package @confluentinc/kafka-javascript, which `npm pack`
# fetches from the npm registry (or the local npm cache) without running any
# install script. It is configured without the features that would need
# downloads or extra libraries (TLS, SASL/GSSAPI, HTTP/OIDC, zstd, zlib);
# the share consumer needs none of them on a plaintext loopback listener.
#
# Environment: INTEROP_BUILD_DIR (default interop/librdkafka/.build, kept
# between runs), CKJS_VERSION (default 1.10.1, which bundles librdkafka
# 2.15.1), RECORDS (default 50), RDKAFKA_DEBUG (librdkafka debug contexts,
# e.g. protocol,cgrp; the consumer's stderr is kept in consumer.err).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${INTEROP_BUILD_DIR:-$here/.build}
ckjs=${CKJS_VERSION:-1.10.1}
records=${RECORDS:-50}
mkdir -p "$build"
build=$(cd "$build" && pwd)
rdk=$build/librdkafka-ckjs-$ckjs

log() { printf '%s interop-librdkafka: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [[ ! -f $rdk/src/librdkafka.so.1 ]]; then
	log "fetching @confluentinc/kafka-javascript@$ckjs (npm pack, no install scripts)"
	tmp=$(mktemp -d "$build/pack-XXXXXX")
	(cd "$tmp" && npm pack --silent "@confluentinc/kafka-javascript@$ckjs" >/dev/null)
	tar -xzf "$tmp"/confluentinc-kafka-javascript-"$ckjs".tgz -C "$tmp" package/deps/librdkafka
	rm -rf "$rdk"
	mv "$tmp/package/deps/librdkafka" "$rdk"
	rm -rf "$tmp"
	log "configuring librdkafka (offline: --no-download, no TLS/SASL/curl/zstd/zlib)"
	(cd "$rdk" && ./configure --no-download --disable-ssl --disable-gssapi --disable-curl \
		--disable-zstd --disable-zlib --disable-lz4-ext >"$build/configure.log" 2>&1) ||
		{ tail -20 "$build/configure.log" >&2; exit 1; }
	log "building librdkafka (make libs)"
	make -C "$rdk" -j2 libs >"$build/make.log" 2>&1 || { tail -30 "$build/make.log" >&2; exit 1; }
fi
ver=$(sed -n 's/^#define RD_KAFKA_VERSION \(0x[0-9a-f]*\)$/\1/p' "$rdk/src/rdkafka.h")
log "librdkafka $(printf '%d.%d.%d' $((ver >> 24 & 255)) $((ver >> 16 & 255)) $((ver >> 8 & 255))) in $rdk"

mkdir -p "$build/include/librdkafka"
cp "$rdk/src/rdkafka.h" "$build/include/librdkafka/"
cc -O2 -Wall -Werror -o "$build/share_consumer" "$here/share_consumer.c" \
	-I"$build/include" -L"$rdk/src" -lrdkafka -Wl,-rpath,"$rdk/src"
(cd "$root" && go build -o "$build/sharelog" ./cmd/server && go build -o "$build/sharelogctl" ./cmd/sharelogctl)

data=$(mktemp -d)
srvlog=$build/server.log
srv=
cleanup() {
	if [[ -n $srv ]]; then kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null || true; fi
	rm -rf "$data"
}
trap cleanup EXIT
"$build/sharelog" --data-dir "$data" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
	--kafka-addr 127.0.0.1:0 --log-format json --log-level info 2>"$srvlog" &
srv=$!
for _ in $(seq 100); do
	grep -q '"msg":"sharelog serving"' "$srvlog" 2>/dev/null && break
	kill -0 "$srv" 2>/dev/null || { cat "$srvlog" >&2; exit 1; }
	sleep 0.1
done
line=$(grep '"msg":"sharelog serving"' "$srvlog") || { log "server not ready"; cat "$srvlog" >&2; exit 1; }
grpc=$(jq -r .grpc_addr <<<"$line")
kafka=$(jq -r .kafka_addr <<<"$line")
log "server: gRPC $grpc, Kafka $kafka"

ctl() { "$build/sharelogctl" --addr "$grpc" "$@"; }
ctl topics create interop-q --partitions 1 >/dev/null
seq 0 $((records - 1)) | sed 's/^/value-/' | ctl produce interop-q >/dev/null
# A new share group starts at the high watermark; start this one at the
# beginning so it sees the records produced above.
ctl share-groups reset-offsets interop-g --to-earliest --topic interop-q --execute >/dev/null

log "share consumer: $records records, explicit acks, one RELEASE"
"$build/share_consumer" "$kafka" interop-g interop-q "$records" >"$build/consumer.out" 2>"$build/consumer.err" || {
	tail -20 "$build/consumer.out" "$build/consumer.err" >&2
	exit 1
}
tail -1 "$build/consumer.out"

# The group's share-partition start offset must now be the high watermark.
start=$(ctl -o json share-groups describe interop-g | jq -r '[.. | objects | select(has("startOffset")) | .startOffset][0]')
if [[ $start != "$records" ]]; then
	log "FAIL: share-partition start offset $start after the consumer, want $records"
	exit 1
fi
log "PASS: librdkafka share consumer received, released, re-received and accepted all $records records; start offset $start"
