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

# Today's demo: two namespaces and a veth pair, RoCEv2 frames across them through the
# XDP program and AF_XDP sockets, against the UDP link, in one run. It becomes the
# daemon + perftest-shaped bench demo when the verbs API lands.
demo:
	@command -v ip >/dev/null || { apt-get update -qq && apt-get install -y -qq iproute2; }
	$(GO) run ./cmd/bench link

clean:
	$(GO) clean -testcache
