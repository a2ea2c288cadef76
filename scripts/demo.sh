#!/usr/bin/env bash
# xrnic demo: two network namespaces joined by a veth pair, the xrnic daemon on
# one end, perftest-shaped bench against it from the other, then the daemon's
# counters and objects, its metrics, and a clean stop with no XDP program left.
#
#   sudo scripts/demo.sh        (or: sudo make demo)
#
# It needs root, Go, iproute2, and for its C part gcc, libibverbs-dev,
# librdmacm-dev and perftest (each installed with apt-get when missing).
# Everything it creates (namespaces, veth pair, processes, binaries) is removed on
# exit, failure or interrupt included. It exits non-zero on any failure.
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (sudo scripts/demo.sh): it creates namespaces and a veth pair and attaches XDP"
command -v go >/dev/null || die "go not found in PATH or /usr/local/go/bin"
command -v timeout >/dev/null || die "timeout (coreutils) not found"
missing=()
for p in iproute2 gcc libc6-dev libibverbs-dev librdmacm-dev perftest; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	timeout 120 apt-get update -qq >/dev/null || die "apt-get update failed"
	timeout 300 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
fi

id=$(printf '%05d' $((($$ + RANDOM) % 100000)))
nsA="xrnic-demo-a-$id" nsB="xrnic-demo-b-$id"
vethA="xdemo${id}a" vethB="xdemo${id}b"
ipA=192.0.2.1 ipB=192.0.2.2
tmp=$(mktemp -d /tmp/xrnic-demo.XXXXXX)
sock="$tmp/xrnic.sock"
metrics=127.0.0.1:9479
daemon=

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $daemon ]] && kill -0 "$daemon" 2>/dev/null; then
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	ip netns del "$nsA" 2>/dev/null || true
	ip netns del "$nsB" 2>/dev/null || true
	if ((rc != 0)) && [[ -s $tmp/xrnic.log ]]; then
		printf '\ndemo: the daemon said:\n' >&2
		sed 's/^/    /' "$tmp/xrnic.log" >&2
	fi
	rm -rf "$tmp"
	if ((rc == 0)); then
		printf '\ndemo: OK\n'
	else
		printf '\ndemo: FAILED\n' >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building xrnic, bench, and xrnic's libibverbs and librdmacm"
timeout 300 go build -o "$tmp/xrnic" ./cmd/xrnic || die "go build ./cmd/xrnic failed"
timeout 300 go build -o "$tmp/bench" ./cmd/bench || die "go build ./cmd/bench failed"
timeout 300 bash clib/build.sh "$tmp/lib" || die "clib/build.sh failed"

say "namespaces $nsA, $nsB; veth $vethA ($ipA) <-> $vethB ($ipB), MTU 4200"
ip netns add "$nsA"
ip netns add "$nsB"
ip link add "$vethA" mtu 4200 type veth peer name "$vethB" mtu 4200
ip link set "$vethA" netns "$nsA"
ip link set "$vethB" netns "$nsB"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" addr add "$ipA/24" dev "$vethA"
ip -n "$nsB" addr add "$ipB/24" dev "$vethB"
ip -n "$nsA" link set "$vethA" up
ip -n "$nsB" link set "$vethB" up
macB=$(ip -n "$nsB" -o link show "$vethB" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
macA=$(ip -n "$nsA" -o link show "$vethA" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
# Static neighbours: RoCE frames need not wait for ARP.
ip -n "$nsA" neigh replace "$ipB" lladdr "$macB" dev "$vethA" nud permanent
ip -n "$nsB" neigh replace "$ipA" lladdr "$macA" dev "$vethB" nud permanent

say "starting the daemon: xrnic -i $vethA (in $nsA)"
ip netns exec "$nsA" "$tmp/xrnic" -i "$vethA" --control "$sock" --attach "$tmp/xrnic.attach" --metrics "$metrics" \
	>"$tmp/xrnic.out" 2>"$tmp/xrnic.log" &
daemon=$!
for ((i = 0; ; i++)); do
	if "$tmp/xrnic" statistic -s "$sock" >/dev/null 2>&1; then break; fi
	kill -0 "$daemon" 2>/dev/null || die "the daemon exited before it was ready"
	((i < 200)) || die "the daemon was not ready within 20 s"
	sleep 0.1
done
sed 's/^/    /' "$tmp/xrnic.log"

say "bench write_bw -d $vethB -s 65536 -n 2000 $ipA (in $nsB)"
timeout 60 ip netns exec "$nsB" "$tmp/bench" write_bw -d "$vethB" -s 65536 -n 2000 "$ipA" ||
	die "bench write_bw failed"

say "another client, for 3 s: bench write_bw -d $vethB -s 4096 -D 3 $ipA (in $nsB)"
timeout 60 ip netns exec "$nsB" "$tmp/bench" write_bw -d "$vethB" -s 4096 -D 3 "$ipA" >"$tmp/c2.out" 2>&1 &
client=$!
for ((i = 0; ; i++)); do
	"$tmp/xrnic" resource show qp -s "$sock" >"$tmp/qp.txt" 2>&1 || die "xrnic resource show qp failed: $(cat "$tmp/qp.txt")"
	grep -q 'state RT[RS]' "$tmp/qp.txt" && break
	((i < 100)) || die "the second client's QP never showed up in xrnic resource show qp"
	sleep 0.05
done
say "while it runs: xrnic resource; xrnic resource show qp; xrnic resource show cq"
timeout 10 "$tmp/xrnic" resource -s "$sock"
cat "$tmp/qp.txt"
timeout 10 "$tmp/xrnic" resource show cq -s "$sock"
wait "$client" || { cat "$tmp/c2.out" >&2; die "the second bench client failed"; }
say "its result"
grep -E '^ +#bytes|^ +4096 ' "$tmp/c2.out" || die "the second bench client printed no result"

say "a process attached to the daemon's device: bench write_bw --daemon (in $nsA) to a bench server on $vethB"
timeout 60 ip netns exec "$nsB" "$tmp/bench" write_bw -d "$vethB" -s 65536 -n 2000 >"$tmp/s3.out" 2>&1 &
server=$!
sleep 0.5
timeout 60 ip netns exec "$nsA" "$tmp/bench" write_bw -d "$vethA" --daemon "$tmp/xrnic.attach" -s 65536 -n 2000 "$ipB" \
	>"$tmp/c3.out" 2>&1 || { cat "$tmp/c3.out" >&2; die "bench --daemon failed"; }
wait "$server" || { cat "$tmp/s3.out" >&2; die "the bench server on $vethB failed"; }
grep -E '^ +#bytes|^ +65536 ' "$tmp/c3.out" || die "bench --daemon printed no result"
grep 'attached (uid' "$tmp/xrnic.log" | tail -n 1 | sed 's/^/    /'

say "an unmodified C program on the daemon's device: Debian's ib_write_bw through xrnic's libibverbs"
echo "    xrnic exec -i $vethA -- ib_write_bw -x 1 -s 65536 -n 2000 $ipB (in $nsA), against a bench server on $vethB"
timeout 60 ip netns exec "$nsB" "$tmp/bench" write_bw -d "$vethB" -x 1 -s 65536 -n 2000 >"$tmp/s4.out" 2>&1 &
server=$!
sleep 0.5
timeout 60 ip netns exec "$nsA" "$tmp/xrnic" exec --attach "$tmp/xrnic.attach" --lib "$tmp/lib" -- \
	ib_write_bw -x 1 -s 65536 -n 2000 "$ipB" >"$tmp/c4.out" 2>&1 || { cat "$tmp/c4.out" >&2; die "ib_write_bw through xrnic exec failed"; }
wait "$server" || { cat "$tmp/s4.out" >&2; die "the bench server on $vethB failed"; }
grep -E 'Device +:|^ +#bytes|^ +65536 ' "$tmp/c4.out" || die "ib_write_bw printed no result"

say "xrnic statistic -d"
timeout 10 "$tmp/xrnic" statistic -s "$sock" -d

say "metrics (http://$metrics/metrics in $nsA), a few lines"
timeout 10 ip netns exec "$nsA" bash -c \
	'exec 3<>/dev/tcp/${1%:*}/${1#*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' _ "$metrics" \
	>"$tmp/metrics.txt" || die "scraping the metrics failed"
grep -E '^xrnic_(sent_pkts_total|rcvd_pkts_total|xdp_redirected_total|port_state|bench_sessions_ended_total)' "$tmp/metrics.txt" ||
	die "the metrics lack xrnic's counters"

say "stopping the daemon (SIGTERM)"
kill -TERM "$daemon"
rc=0
for ((i = 0; i < 100; i++)); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
kill -0 "$daemon" 2>/dev/null && die "the daemon did not exit within 10 s of SIGTERM"
wait "$daemon" || rc=$?
daemon=
tail -n 4 "$tmp/xrnic.log" | sed 's/^/    /'
((rc == 0)) || die "the daemon exited with status $rc"
if ip -n "$nsA" -d link show "$vethA" | grep -q 'prog/xdp'; then
	die "an XDP program is still attached to $vethA"
fi
echo "    daemon exited 0; no XDP program on $vethA"
