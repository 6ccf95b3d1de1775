#!/usr/bin/env bash
# run.sh: benchmark hybridlimit against its peers, side by side, and write
# RESULTS.txt (raw `go test -bench` output, for benchstat) and RESULTS.md
# (the report: machine, Go and Redis versions, date, goals and ratios).
#
# The benchmarks start their own redis-server on a free loopback port (it
# must be on PATH) and stop it. Each round runs every benchmark once, and
# the ratios are taken within a round, so load that drifts during the run
# touches both sides of a ratio alike.
#
# Environment: ROUNDS (default 6, the fewest benchstat gives a confidence
# interval for), BENCHTIME (default 1s), BENCH (benchmark regexp, default
# all), OUT (raw output file, default RESULTS.txt), REPORT (default
# RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")"

ROUNDS=${ROUNDS:-6}
BENCHTIME=${BENCHTIME:-1s}
BENCH=${BENCH:-.}
OUT=${OUT:-RESULTS.txt}
REPORT=${REPORT:-RESULTS.md}
GO=${GO:-go}

command -v redis-server >/dev/null 2>&1 || {
	echo "run.sh: redis-server is not on PATH (Debian: apt-get install -y redis-server)" >&2
	exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One binary for every round: the rounds then differ by nothing but time.
"$GO" test -c -o "$tmp/bench.test" .

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true; }
load_before=$(load)
: >"$tmp/raw"
for i in $(seq "$ROUNDS"); do
	echo "run.sh: round $i of $ROUNDS (load average $(load))" >&2
	# A missing redis-server fails the Redis benchmarks instead of
	# skipping them.
	HYBRIDLIMIT_REQUIRE_REDIS=1 "$tmp/bench.test" -test.run '^$' -test.bench "$BENCH" \
		-test.benchmem -test.benchtime "$BENCHTIME" -test.timeout 30m | tee -a "$tmp/raw"
done
load_after=$(load)

mv "$tmp/raw" "$OUT"
"$GO" run ./cmd/report -in "$OUT" -load-before "$load_before" -load-after "$load_after" >"$tmp/report"
mv "$tmp/report" "$REPORT"
cat "$REPORT"
