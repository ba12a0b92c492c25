# strata — build, demo, test and benchmark.
#
#   make demo    set up, build, and run the dev mesh (ARGS=--once exits after printing it)
#   make test    set up, then run every test (race detector on the concurrent
#                packages), then build the release and test it (test-release)
#   make bench   run the benchmarks and print a table with ratios
#                (STRATA_BUSY_FOR=5m: BenchmarkBusyHosts watches each level
#                for 5 minutes instead of 30s)
#   make battery hostile gossip and API load against real agents: a table
#   make release build the linux/amd64 and linux/arm64 tarballs and .debs
#                into bin/release (VERSION=, ARCHES= override)
#   make test-release  check the artifacts: .deb contents, arm64 under qemu
#
# Set-up is idempotent: it installs what a fresh machine lacks (Go modules,
# the ONNX Runtime shared library, Debian packages the tests use) and skips
# what is already there.

GO      ?= go
BIN     := bin/strata
ARGS    ?=
export STRATA_ORT_LIB ?= $(CURDIR)/.deps/onnxruntime/libonnxruntime.so.1
export STRATA_DEMO_DATA ?= $(CURDIR)/.deps/data/breast_cancer.csv
# Every build here is -trimpath, as the release's is (reproducible, no build
# directory in the binary), beside what `go env GOFLAGS` holds. Then `make
# release` after `make build` or `make test` compiles only the main package
# for this machine's architecture; another flag would compile every package
# again.
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell $(GO) env GOFLAGS)) -trimpath)

.PHONY: all build demo test test-short race bench battery fuzz setup setup-go setup-ort setup-debs setup-data vet fmt lint clean release test-release

all: build

setup: setup-go setup-ort setup-debs setup-data

setup-go:
	$(GO) mod download

setup-ort:
	@bash scripts/install-ort.sh

setup-debs:
	@bash scripts/install-debs.sh

setup-data:
	@bash scripts/install-data.sh

# The version and commit are stamped here: GOFLAGS may hold -buildvcs=false,
# and then Go records neither (strata version would say "(devel)").
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo devel)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
DIRTY   := $(shell git diff --quiet HEAD 2>/dev/null || echo true)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.modified=$(DIRTY)

build: setup-go
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/strata

demo: setup build
	./$(BIN) dev $(ARGS)

test: setup
	@GO=$(GO) MAKE=$(MAKE) bash scripts/test.sh

bench: setup build
	@bash scripts/bench.sh

# Hostile input against three real agents on loopback: a table of packets,
# panics, log lines/s, RSS, peers marked failed, 413 and 429 answers.
battery: setup
	STRATA_BATTERY=1 $(GO) test -count=1 -run '^TestBattery$$' -v ./cmd/strata/

# Every fuzz target for FUZZTIME each (default 5m); `make test` runs their
# seed corpora as ordinary tests.
fuzz: setup
	@bash scripts/fuzz.sh

release: setup-go
	@bash scripts/release.sh

# The release tests run the arm64 binary under qemu-user (installed by
# scripts/install-release-debs.sh) and read the .debs from bin/release.
test-release: release
	@bash scripts/install-release-debs.sh
	STRATA_RELEASE_TESTS=1 $(GO) test -count=1 -timeout 10m -v ./packaging/releasetest/

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	rm -rf bin
