# make test: everything CI runs, on a fresh Debian machine.
GO ?= go
export HYBRIDLIMIT_REQUIRE_REDIS = 1

.PHONY: test redis cc vet fmt-check race bench rls-bench

test: redis cc vet fmt-check race

# Install redis-server when it is missing (Debian, as root). The tests start
# and stop their own servers on free loopback ports.
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "redis-server is missing: install it (apt-get install -y redis-server) and re-run" >&2; exit 1; \
		fi; }
	@redis-server --version

# -race needs cgo, and so a C compiler, which minimal Debian images lack.
cc:
	@command -v "$$($(GO) env CC)" >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; \
		else \
			echo "a C compiler is missing (go test -race needs cgo): install gcc and re-run" >&2; exit 1; \
		fi; }

# bench/ is a module of its own (it pulls in the peers it is measured
# against), which ./... leaves out.
vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

# gofmt from the toolchain GO names, not whichever is on PATH (or none: an
# empty list from a missing gofmt passed).
fmt-check:
	@out="$$("$$($(GO) env GOROOT)/bin/gofmt" -l .)" || exit 1; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The hybrid limiter's suite runs a second time with every key's allowance
# spread over per-CPU counters, which only hot keys get by default.
race:
	$(GO) test -race -count=1 -timeout 15m ./...
	$(GO) test -race -count=1 -timeout 15m -tags hybridlimit_stripeall ./sync/

# make bench: ours next to the peers (x/time/rate, uber ratelimit,
# redis_rate) on one loopback Redis; writes bench/RESULTS.md.
bench: redis
	cd bench && GO=$(GO) ./run.sh

# make rls-bench: the rate limit service next to Envoy's reference service
# (built from rls/reference) on one Redis; writes its section of docs/rls.md.
rls-bench: redis
	$(GO) test -count=1 -timeout 15m -run TestSideBySide ./cmd/rls/ -rls.sidebyside=$(CURDIR)/docs/rls.md
