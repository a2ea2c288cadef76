package bpf

// The object and its Go wrapper are committed, so building needs no clang.
// Regenerate with `make generate` (or `go generate ./bpf/`); check-generated.sh
// verifies that the committed files match xrnic.c. bpf2go compiles from this
// folder with a relative source and maps the folder to "." in debug info, so the
// output does not depend on where the repository is checked out.
//
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel xrnic xrnic.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror
