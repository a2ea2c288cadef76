#!/usr/bin/env bash
# Builds xrnic's libibverbs.so.1 and librdmacm.so.1 into OUTDIR (default
# build/lib) with Debian's C toolchain and the public headers of
# libibverbs-dev and librdmacm-dev, warnings as errors.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/lib}
mkdir -p "$out"
cc=${CC:-gcc}
flags=(-std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden -I"$here/include" -shared -Wl,--no-undefined)
"$cc" "${flags[@]}" -Wl,-soname,libibverbs.so.1 -Wl,--version-script="$here/src/libibverbs.map" \
	-o "$out/libibverbs.so.1" "$here"/src/{conn,conv,mem,ring,verbs,strings,private,extra,wr,cqex}.c -lpthread
"$cc" "${flags[@]}" -Wl,-soname,librdmacm.so.1 -Wl,--version-script="$here/src/librdmacm.map" \
	-o "$out/librdmacm.so.1" "$here"/src/{rdmacm,rdmacm_stubs,conv}.c -L"$out" -l:libibverbs.so.1 -lpthread
