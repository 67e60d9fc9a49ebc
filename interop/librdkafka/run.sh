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
# Two runs against one server:
#  1. share_consumer.c: one consumer, explicit acks, a RELEASE redelivered,
#     every record accepted;
#  2. ordered_consumer.c: a key-ordered share group (share.ordering=key,
#     docs/queues.md), keyed records over two partitions, three consumers in
#     parallel processes with random RELEASEs and REJECTs, one of them killed
#     (SIGKILL) midway and replaced; keycheck (the Go tests' history checker,
#     internal/testsupport/keyhistory) checks their timestamped history: per
#     key no two records locked at once, the applied ACCEPTs in offset order,
#     every record accepted, rejected or archived.
#
# Environment: INTEROP_BUILD_DIR (default interop/librdkafka/.build, kept
# between runs), CKJS_VERSION (default 1.10.1, which bundles librdkafka
# 2.15.1), RECORDS (default 50), ORDERED_KEYS and ORDERED_PER_KEY (default
# 20 and 100), ORDERING (default key; none runs the second group without
# ordering, to see keycheck fail), RDKAFKA_DEBUG (librdkafka debug contexts,
# e.g. protocol,cgrp; the consumers' stderr is kept in consumer.err and
# ordered-N.err).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${INTEROP_BUILD_DIR:-$here/.build}
ckjs=${CKJS_VERSION:-1.10.1}
records=${RECORDS:-50}
okeys=${ORDERED_KEYS:-20}
operkey=${ORDERED_PER_KEY:-100}
ordering=${ORDERING:-key}
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
for prog in share_consumer ordered_consumer; do
	cc -O2 -Wall -Werror -o "$build/$prog" "$here/$prog.c" \
		-I"$build/include" -L"$rdk/src" -lrdkafka -Wl,-rpath,"$rdk/src"
done
(cd "$root" && go build -o "$build/sharelog" ./cmd/server && go build -o "$build/sharelogctl" ./cmd/sharelogctl &&
	go build -o "$build/keycheck" ./interop/librdkafka/keycheck)

data=$(mktemp -d)
srvlog=$build/server.log
srv=
consumers=()
cleanup() {
	for pid in "${consumers[@]}"; do kill "$pid" 2>/dev/null || true; done
	if [[ -n $srv ]]; then kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null || true; fi
	rm -rf "$data"
}
trap cleanup EXIT
: >"$srvlog" # truncated here, not in the background job: the wait below must not read the last run's log
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

# 2. A key-ordered share group: three consumers, one killed and replaced.
otopic=interop-ordered
ogroup=interop-ordered-g
ototal=$((okeys * operkey))
ctl topics create "$otopic" --partitions 2 >/dev/null
for i in $(seq 0 $((ototal - 1))); do printf 'k%d\tv%d\n' $((i % okeys)) "$i"; done | ctl produce "$otopic" >/dev/null
# A short lock and session, so that the killed consumer's records and
# partitions come back within seconds.
ctl share-groups config set "$ogroup" ordering="$ordering" auto_offset_reset=earliest delivery_count_limit=5 \
	record_lock_duration_ms=2000 session_timeout_ms=6000 heartbeat_interval_ms=1000 >/dev/null
for p in 0 1; do ctl fetch "$otopic" --partition "$p" | awk -F'\t' -v p="$p" '{print p "\t" $1 "\t" $2}'; done >"$build/ordered.produced"
if [[ $(wc -l <"$build/ordered.produced") != "$ototal" ]]; then
	log "FAIL: fetched $(wc -l <"$build/ordered.produced") of the $ototal records produced"
	exit 1
fi
rm -f "$build"/ordered-*.out "$build"/ordered-*.err
startc() { # startc N: consumer N, its output in ordered-N.out
	"$build/ordered_consumer" "$kafka" "$ogroup" "$otopic" "$1" >"$build/ordered-$1.out" 2>"$build/ordered-$1.err" &
	consumers[$1]=$!
}
# settled: the sum of the group's share-partition start offsets.
settled() { ctl -o json share-groups describe "$ogroup" | jq '[.. | objects | select(has("startOffset")) | .startOffset | tonumber] | add // 0'; }
waitsettled() { # waitsettled N: until the start offsets add up to N (90 s at most)
	for _ in $(seq 900); do
		[[ $(settled) -ge $1 ]] && return 0
		for c in "${!consumers[@]}"; do
			kill -0 "${consumers[$c]}" 2>/dev/null || { log "FAIL: consumer $c exited"; tail -5 "$build/ordered-$c.err" >&2; exit 1; }
		done
		sleep 0.1
	done
	log "FAIL: start offsets at $(settled) of $1 after 90 s"
	exit 1
}
log "ordered share group ($ordering): $ototal records ($okeys keys x $operkey) on 2 partitions, 3 consumers, random RELEASE/REJECT"
began=$(date +%s.%N)
for c in 1 2 3; do startc "$c"; done
waitsettled $((ototal / 3))
log "killing consumer 1 (SIGKILL) at start offsets $(settled) of $ototal; consumer 4 replaces it"
{ kill -KILL "${consumers[1]}" && wait "${consumers[1]}"; } 2>/dev/null || true
unset 'consumers[1]'
startc 4
waitsettled "$ototal"
log "all $ototal records settled after $(printf '%.1f' "$(echo "$(date +%s.%N) - $began" | bc)") s; stopping the consumers"
for c in "${!consumers[@]}"; do kill -TERM "${consumers[$c]}"; done
for c in "${!consumers[@]}"; do
	wait "${consumers[$c]}" || { rc=$?; log "FAIL: consumer $c exited $rc"; tail -5 "$build/ordered-$c.err" >&2; exit 1; }
	unset "consumers[$c]"
done
for c in 1 2 3 4; do
	printf '  consumer %d: %d deliveries, %d results\n' "$c" "$(grep -c '^got' "$build/ordered-$c.out")" "$(grep -c '^result' "$build/ordered-$c.out")" >&2
done
if ! "$build/keycheck" -topic "$otopic" -produced "$build/ordered.produced" -limit 5 "$build"/ordered-{1,2,3,4}.out; then
	log "FAIL: the ordered group's history has violations (ordering=$ordering)"
	exit 1
fi
log "PASS: librdkafka share consumers in a key-ordered group: no key locked twice at once, accepted offsets per key increasing, every record settled"
