#!/usr/bin/env bash
# Checks that the committed bpf/xrnic_bpfel.{o,go} are what xrnic.c compiles to:
# regenerates them with bpf2go in a temporary copy of the module and compares
# byte for byte. Used by .ci/run and `make generate-check`.
#
# The object depends on the compiler, so clang is pinned: Debian bookworm's
# clang-14 (1:14.0.6). Headers come from libbpf-dev and linux-libc-dev; their
# versions are printed when the check fails.
set -euo pipefail

pinned_clang="Debian clang version 14.0.6"
generated=(xrnic_bpfel.o xrnic_bpfel.go)

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

fail() {
	echo "check-generated: $*" >&2
	exit 1
}

for tool in clang-14 llvm-strip-14 go; do
	command -v "$tool" >/dev/null || fail "$tool not found (apt-get install clang-14 llvm-14 libbpf-dev linux-libc-dev)"
done
version=$(clang-14 --version | head -n 1)
[[ $version == "$pinned_clang"* ]] ||
	fail "clang-14 is \"$version\", want \"$pinned_clang\" (Debian bookworm): another compiler builds another object"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bpf"
cp "$root/go.mod" "$root/go.sum" "$tmp/"
cp "$here/gen.go" "$here"/*.c "$tmp/bpf/"
if compgen -G "$here/*.h" >/dev/null; then cp "$here"/*.h "$tmp/bpf/"; fi

(cd "$tmp" && go generate ./bpf/) || fail "go generate failed in a copy of the module"

stale=0
for f in "${generated[@]}"; do
	if [[ ! -f $here/$f ]]; then
		echo "check-generated: bpf/$f is missing" >&2
		stale=1
	elif ! cmp -s "$tmp/bpf/$f" "$here/$f"; then
		echo "check-generated: bpf/$f differs from what xrnic.c generates" >&2
		case $f in
		*.go) diff -u "$here/$f" "$tmp/bpf/$f" >&2 || true ;;
		*) sha256sum "$here/$f" "$tmp/bpf/$f" | sed "s|$tmp/|regenerated |" >&2 ;;
		esac
		stale=1
	fi
done
for f in "$here"/xrnic_bpf*; do
	name=$(basename "$f")
	[[ -f $tmp/bpf/$name ]] || { echo "check-generated: bpf/$name is not generated any more: delete it" >&2; stale=1; }
done

if ((stale)); then
	echo "check-generated: header packages: $(dpkg-query -W -f='${Package} ${Version}; ' libbpf-dev linux-libc-dev 2>/dev/null || echo unknown)" >&2
	fail "the committed BPF object is stale: run \`make generate\` (go generate ./bpf/) and commit bpf/xrnic_bpfel.{o,go}"
fi
echo "check-generated: bpf/xrnic_bpfel.{o,go} match xrnic.c"
