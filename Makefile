# xrnic: a software RoCEv2 NIC in Go.
#
#   make demo      set up and run the demo (needs root: namespaces, veth, XDP)
#   make test      every test, under -race, plus short fuzz runs (root runs the data-path tests)
#   make lint      gofmt + go vet + staticcheck
#   make generate  rebuild the XDP program's Go bindings and object with clang (bpf2go)

GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 10s
# The tests of different packages each build namespaces and veth pairs; two cores here.
TESTFLAGS ?= -race -count=1 -timeout 20m -p 2

.PHONY: all build test test-unit fuzz lint generate generate-check demo bench clean

all: build

build:
	$(GO) build ./...

test: test-unit fuzz

test-unit:
	$(GO) test $(TESTFLAGS) $(PKGS)
	# Whole-process allocation counts mean nothing under -race (sync.Pool drops
	# items there), so the tests of them run once more without it.
	$(GO) test -count=1 -run 'Allocat|NoAllocs|ZeroAlloc' ./internal/perftest/ ./nic/link/

# Each fuzz target runs for a short, bounded time (go test allows one target per run).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./nic/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzRoundTrip$$' -fuzztime $(FUZZTIME) ./nic/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzParseGID$$' -fuzztime $(FUZZTIME) ./nic/netdev/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckModify$$' -fuzztime $(FUZZTIME) ./nic/qpstate/
	$(GO) test -run '^$$' -fuzz '^FuzzLookup$$' -fuzztime $(FUZZTIME) ./nic/mr/
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime $(FUZZTIME) ./nic/engine/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

generate:
	$(GO) generate ./bpf/

# Regenerate the XDP objects into a scratch copy with the pinned clang and diff them
# against the committed ones.
generate-check:
	bash bpf/check-generated.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./nic/...

# The demo: two namespaces and a veth pair, the xrnic daemon on one end (XDP +
# AF_XDP), perftest-shaped bench against it from the other, the daemon's counters,
# objects and metrics, and a clean stop with no XDP program left. Needs root.
demo:
	bash scripts/demo.sh

clean:
	$(GO) clean -testcache
