# make test: everything CI runs, on a fresh Debian machine.
GO ?= go

# The stages of make test, in order. Each is a target below, which can also
# be run alone (make race); a new stage is its target plus its name here.
STAGES = redis valkey cc fmt-check alerts vet-untested race

.PHONY: test vet $(STAGES) valkey-suites bench gubernator results rls-bench image image-test

# Each stage runs in a make of its own, so that make test can say which
# stage runs, how long each took and which one failed. MAKELEVEL=0 keeps
# GNU make from framing each stage in "Entering directory" lines.
test:
	@total=0; summary=; \
	for stage in $(STAGES); do \
		echo "==> make $$stage"; \
		start=$$(date +%s); \
		if MAKELEVEL=0 $(MAKE) $$stage; then rc=0; else rc=$$?; fi; \
		took=$$(($$(date +%s) - start)); total=$$((total + took)); \
		if [ "$$rc" -ne 0 ]; then \
			echo "make test: stage $$stage FAILED after $${took}s (exit $$rc); run it alone with: make $$stage" >&2; \
			exit 1; \
		fi; \
		echo "<== $$stage passed in $${took}s"; \
		summary="$$summary $$stage $${took}s,"; \
	done; \
	echo "make test: every stage passed in $${total}s:$${summary%,}"

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

# Install valkey-server when it is missing (Debian, as root). Bookworm has
# it (8.0) in its backports suite, which is added to the Debian sources the
# machine already has (the deb822 file's first Suites line, or else a line
# beside sources.list's first bookworm one, on its mirror).
valkey:
	@command -v valkey-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			. /etc/os-release; target=; \
			if [ "$$VERSION_CODENAME" = bookworm ]; then \
				target="-t bookworm-backports"; src=/etc/apt/sources.list.d/debian.sources; \
				if [ -f $$src ]; then \
					grep -q '^Suites:.*bookworm-backports' $$src || sed -i '0,/^Suites: bookworm\( \|$$\)/s//Suites: bookworm bookworm-backports\1/' $$src; \
				elif [ -f /etc/apt/sources.list ]; then \
					awk '$$1 == "deb" && $$3 == "bookworm" { print "deb", $$2, "bookworm-backports main"; exit }' /etc/apt/sources.list >/etc/apt/sources.list.d/backports.list; \
				fi; \
			fi; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$target valkey-server >/dev/null; \
		else \
			echo "valkey-server is missing: install it (Debian bookworm: from bookworm-backports) and re-run" >&2; exit 1; \
		fi; }
	@valkey-server --version

# -race needs cgo, and so a C compiler, which minimal Debian images lack.
cc:
	@command -v "$$($(GO) env CC)" >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; \
		else \
			echo "a C compiler is missing (go test -race needs cgo): install gcc and re-run" >&2; exit 1; \
		fi; }

# The alerting rules shipped in metrics/alerts: promtool (Debian's
# prometheus package, installed when missing, as root) checks them and runs
# their unit tests on synthetic series.
alerts:
	@command -v promtool >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		else \
			echo "promtool is missing: install it (apt-get install -y prometheus) and re-run" >&2; exit 1; \
		fi; }
	cd metrics/alerts && promtool check rules hybridlimit.rules.yml && promtool test rules hybridlimit.rules.test.yml

# make vet: every package, with the analyzers go vet runs by default.
# bench/ is a module of its own (it pulls in the peers it is measured
# against), which ./... leaves out. Both build what they check with the
# race detector, as the race stage's tests are built, so that the packages
# compiled for one are found in the build cache by the other.
#
# make test vets the same code in two places instead of running vet ahead
# of the tests: the packages with tests in the race stage's first pass
# (go test -vet=all: the same analyzers, on each package and its tests,
# run as its test binary is built, while other packages' tests wait on
# the network), and in the stage vet-untested the packages without tests
# and bench/. Ahead of the tests, vet cost a fresh clone here 68 s more
# than the tests' build alone; go test -vet=all adds about half that CPU.
vet:
	$(GO) vet -race ./...
	cd bench && $(GO) vet -race ./...

vet-untested:
	@pkgs="$$($(GO) list -f '{{if not (or .TestGoFiles .XTestGoFiles)}}{{.ImportPath}}{{end}}' ./...)"; \
	echo "go vet -race" $$pkgs; $(GO) vet -race $$pkgs
	cd bench && $(GO) vet -race ./...

# gofmt from the toolchain GO names, not whichever is on PATH (or none: an
# empty list from a missing gofmt passed).
fmt-check:
	@out="$$("$$($(GO) env GOROOT)/bin/gofmt" -l .)" || exit 1; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The race stage runs four passes. The first, every package but for the
# fleet failover tests, three packages at a time, runs beside the second,
# the hybrid limiter's suite a second time with every key's allowance
# spread over per-CPU counters, which only hot keys get by default, less
# the tests that run in the default build only (sync's defaultBuildOnly:
# processes, faults, and load on keys they stripe themselves); its output
# follows the first's. The last, after the fleet failover tests, runs
# every script's suite (./internal/scripts/: the wire and stored formats,
# each script against its model) on valkey-server: beside the first two,
# the load failed a first decision's fetch in one test of each of two
# fresh-clone runs here. The Redis-facing suites on Valkey all at once are
# make valkey-suites: about as long as the first pass again. The first names its longest packages first so that
# ./sync/ (about 150 s alone, mostly waiting on sync intervals and Redis)
# starts early; within a package, tests that mostly wait (cmd/rls's
# services, the reset across processes) run four at a time. Three
# packages at a time keep a fresh clone's two cores 97% busy in the first
# pass, against 85% at two. The fleet failover tests of sync (a cluster
# and several processes of their own each, some 13 s apiece, two at a
# time: about one core) run last, alone: beside the second suite on a warm
# build cache, six cases of nine fell thousands of decisions behind their
# schedule and two failed their bounds (kill/closed: a cold key denied for
# Redis's absence; stop3s/fallback: 0.23% over B + r T, against 0.2%);
# beside two busy loops at nice 19 two of nine failed theirs; three cases
# at once, beside a busy machine, left Optimistic past its bound too. Two
# at once, alone, took 74 to 77 s here and failed one run of eight on a
# fresh clone (stop3s/optimistic: 6,281 decisions late, 0.226% over); one
# at a time takes 135 s. Any pass failing fails the stage; all four run.
# HYBRIDLIMIT_REQUIRE_REDIS=1: a missing server fails the tests instead of
# skipping them.
RACE = HYBRIDLIMIT_REQUIRE_REDIS=1 $(GO) test -race -count=1 -parallel 4 -timeout 15m
race:
	@striped=$$(mktemp); \
	$(RACE) -tags hybridlimit_stripeall ./sync/ >$$striped 2>&1 & sp=$$!; \
	$(RACE) -p 3 -vet=all -skip 'TestFleetFailover' ./sync/ ./cmd/rls/ ./global/ ./sim/ ./...; rc=$$?; \
	wait $$sp; rs=$$?; \
	echo "== ./sync/ built with -tags hybridlimit_stripeall:"; cat $$striped; rm -f $$striped; \
	echo "== ./sync/, the fleet failover tests:"; $(RACE) -parallel 2 -run 'TestFleetFailover' ./sync/; rf=$$?; \
	echo "== ./internal/scripts/ on valkey-server:"; HYBRIDLIMIT_SERVER=valkey $(RACE) ./internal/scripts/; rv=$$?; \
	[ $$rc -eq 0 ] && [ $$rs -eq 0 ] && [ $$rf -eq 0 ] && [ $$rv -eq 0 ]

# make valkey-suites: every suite that runs against a real server, on
# valkey-server instead of redis-server.
valkey-suites: valkey
	HYBRIDLIMIT_SERVER=valkey $(RACE) -p 2 ./sync/ ./cmd/rls/ ./global/ ./internal/scripts/ ./lua/ ./sharding/ ./sim/ .

# make bench: ours next to the peers (x/time/rate, uber ratelimit,
# redis_rate) on one loopback Redis; writes bench/RESULTS.md.
bench: redis
	cd bench && GO=$(GO) ./run.sh

# make results: the simulator, live runs, cluster tests and benchmarks
# behind docs/results.md and README.md's headline table, which it
# rewrites (several minutes; both cores).
# Gubernator beside the hybrid limiter: bench/gubernator, a module of its
# own that make test does not build (Gubernator's dependencies take
# minutes to compile; see its doc.go). make results runs it too.
gubernator: redis
	cd bench/gubernator && HYBRIDLIMIT_REQUIRE_REDIS=1 $(GO) test -count=1 -v -timeout 20m -run '^(TestSideBySide)$$' .

results: redis valkey
	GO=$(GO) $(GO) run ./internal/results

# make rls-bench: the rate limit service next to Envoy's reference service
# (built from rls/reference) on one Redis; writes its section of docs/rls.md.
rls-bench: redis
	$(GO) test -count=1 -timeout 15m -run TestSideBySide ./cmd/rls/ -rls.sidebyside=$(CURDIR)/docs/rls.md

# make image: the rate limit service's container image (deploy/Containerfile),
# tagged $(IMAGE), with podman or else buildah (Debian's podman, installed
# when neither is there, as root). The build context is made here: the
# static binary and the CA bundle, so nothing is pulled from a registry.
# Images go to the vfs storage driver, which needs neither fuse nor
# overlay: list them with podman --storage-driver vfs images. RLS_BINARY
# names a static binary to ship instead of building one (the tests pass
# the one they test).
IMAGE ?= localhost/hybridlimit/rls:dev
IMAGE_STORAGE ?= vfs
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
image:
	@command -v podman >/dev/null 2>&1 || command -v buildah >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman >/dev/null; \
		else \
			echo "neither podman nor buildah is installed: install one (apt-get install -y podman) and re-run" >&2; exit 1; \
		fi; }
	@test -r $(CA_BUNDLE) || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates >/dev/null; \
		else \
			echo "$(CA_BUNDLE) is missing: install ca-certificates and re-run" >&2; exit 1; \
		fi; }
	@ctx=$$(mktemp -d) && trap 'rm -rf "$$ctx"' EXIT && \
	if [ -n "$(RLS_BINARY)" ]; then cp "$(RLS_BINARY)" "$$ctx/rls"; \
	else CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o "$$ctx/rls" ./cmd/rls; fi && \
	cp $(CA_BUNDLE) "$$ctx/ca-certificates.crt" && \
	if command -v podman >/dev/null 2>&1; then \
		podman --storage-driver $(IMAGE_STORAGE) build --quiet -f deploy/Containerfile -t $(IMAGE) "$$ctx"; \
	else \
		buildah --storage-driver $(IMAGE_STORAGE) bud --quiet -f deploy/Containerfile -t $(IMAGE) "$$ctx"; \
	fi
	@echo "built $(IMAGE)"

# make image-test: builds the image (installing podman if need be) and runs
# its entrypoint from the image's own filesystem as user 65534 against a
# real redis-server (cmd/rls TestImage).
image-test: redis image
	HYBRIDLIMIT_REQUIRE_IMAGE=1 HYBRIDLIMIT_REQUIRE_REDIS=1 $(GO) test -count=1 -run TestImage -v ./cmd/rls/
