# gatetuner — build, test, benchmark.
GO        ?= go
PKG       := github.com/gatetuner/gatetuner
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN       := bin/gatetuner
# Real test components (kube-apiserver, etcd, Prometheus, ...) are built into this ignored cache.
CACHE     ?= $(CURDIR)/.cache
export GATETUNER_CACHE := $(CACHE)
FUZZTIME  ?= 10s
TEST_TIMEOUT ?= 75m
# THANOS=1 also builds Thanos and compiles the Thanos tests (-tags thanos); see docs/estimator.md.
TEST_TAGS := $(if $(THANOS),-tags thanos)

.PHONY: all build test test-unit test-components e2e sweeps bench fuzz lint clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gatetuner

## test: everything CI runs, against a real Prometheus and a real API server.
## A test that needs a missing component fails loudly here (it only skips under -short).
test: test-components
	$(GO) vet $(TEST_TAGS) ./...
	$(GO) test $(TEST_TAGS) -count=1 -timeout $(TEST_TIMEOUT) ./...

## test-unit: the quick loop; integration tests that need real servers skip under -short.
test-unit:
	$(GO) test -short -count=1 ./...

## test-components: build kube-apiserver, etcd and Prometheus + promtool (the module go.mod
## pins) at pinned versions into $(CACHE) (cached). It also builds VictoriaMetrics, and Thanos
## when THANOS=1.
test-components:
	./test/kubeharness/build-components.sh "$(CACHE)"
	./test/promharness/build-prometheus.sh "$(CACHE)"
	./test/vmharness/build-backends.sh "$(CACHE)" $(if $(THANOS),all,vm)

## e2e: the closed-loop test alone.
e2e: test-components
	$(GO) test -count=1 -timeout 40m -run 'TestClosedLoop' -v ./test/e2e/...

## sweeps: the simulator sweeps behind the tuner's proof tables (docs/tuner.md), logged.
sweeps:
	$(GO) test -count=1 -timeout 30m -run 'TestPromptShiftBestBarsAcrossSeeds|TestPromptShiftPhaseByPhase|TestModelTracksRecords|TestStaticBarTracksTheShift' -v ./test/fleetsim/ ./tuner/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## fuzz: a short run of every fuzz target.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## lint: gofmt, vet and golangci-lint (.golangci.yml), built at a pinned version into $(CACHE) (cached).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	"$$(./test/lint/build-golangci-lint.sh "$(CACHE)")" run ./...

clean:
	rm -rf bin
