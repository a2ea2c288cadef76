# xrnic: a software RoCEv2 NIC in Go.
#
#   make demo      set up and run the demo (needs root: namespaces, veth, XDP)
#   make test      every test, under -race, plus short fuzz runs (root runs the data-path tests)
#   make lint      gofmt + go vet + staticcheck
#   make generate  rebuild the XDP program's Go bindings and object with clang (bpf2go)
#   make interop   xrnic against Linux Soft-RoCE in a qemu guest (root; ../shared/tools/rxe-vm)
#   make clib      xrnic's libibverbs.so.1 and librdmacm.so.1 into build/lib (xrnic exec uses them)

GO        ?= go
PKGS      ?= ./...
# Fuzz budgets are execution counts, not durations: with a duration, Go 1.26's
# coordinator can fail a clean run with "context deadline exceeded" at the boundary
# (golang/go#75804, fixed in 1.27). Each run is also bounded in time by -timeout.
FUZZTIME  ?= 100000x
# The tests of different packages each build namespaces and veth pairs; two cores here.
TESTFLAGS ?= -race -count=1 -timeout 20m -p 2

.PHONY: all build clib test test-unit fuzz lint generate generate-check demo bench bench-compare interop clean

all: build

build: clib
	$(GO) build ./...

clib:
	bash clib/build.sh build/lib

test: test-unit fuzz

test-unit:
	$(GO) test $(TESTFLAGS) $(PKGS)
	# Whole-process allocation counts mean nothing under -race (sync.Pool drops
	# items there), so the tests of them run once more without it.
	$(GO) test -count=1 -run 'Allocat|NoAllocs|ZeroAlloc' ./cmd/internal/perftest/ ./nic/link/ ./nic/engine/

# Each fuzz target runs a short, bounded budget (go test allows one target per run).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzRoundTrip$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzParseGID$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/netdev/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckModify$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/qpattr/
	$(GO) test -run '^$$' -fuzz '^FuzzLookup$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/mr/
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/engine/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/mad/
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime $(FUZZTIME) -timeout 5m ./nic/cm/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags interop ./interop/
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags interop ./interop/

generate:
	$(GO) generate ./bpf/

# Regenerate the XDP objects into a scratch copy with the pinned clang and diff them
# against the committed ones.
generate-check:
	bash bpf/check-generated.sh

# The interop suite (interop/, build tag interop): boots a Debian guest running
# rdma_rxe under qemu (building its image first if absent), then ibv_rc_pingpong
# and ib_write_bw in the guest against bench, both roles, RoCE MTU 1024 and 4096.
# Captures, both sides' output and ICRC reports land in artifacts/interop/.
# A failure's messages come again at the end (scripts/test-failures.awk): CI
# keeps the log's tail.
interop:
	mkdir -p artifacts
	{ $(GO) test -tags interop -count=1 -timeout 48m -v ./interop/ 2>&1; echo $$? > artifacts/interop.rc; } | tee artifacts/interop.log
	@rc=$$(cat artifacts/interop.rc); [ "$$rc" = 0 ] || awk -f scripts/test-failures.awk artifacts/interop.log; exit $$rc

# xrnic against its baselines in one run on one veth pair (root; iperf3).
bench-compare:
	$(GO) build -o build/bench ./cmd/bench && ./build/bench compare --best-of 3

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./nic/...

# The demo: two namespaces and a veth pair, the xrnic daemon on one end (XDP +
# AF_XDP), perftest-shaped bench against it from the other, the daemon's counters,
# objects and metrics, and a clean stop with no XDP program left. Needs root.
demo:
	bash scripts/demo.sh

clean:
	$(GO) clean -testcache
