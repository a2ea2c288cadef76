// Package interop holds the suite that proves xrnic wire-compatible with Linux
// Soft-RoCE (rdma_rxe): it boots a qemu guest running Debian's kernel with
// rdma_rxe, rdma-core and perftest (../shared/tools/rxe-vm), runs xrnic's bench
// on the veth end the guest is bridged to, and plays ibv_rc_pingpong and
// ib_write_bw against it in both roles, at RoCE MTU 1024 and 4096.
//
// The tests carry the build tag "interop" so that `go test ./...` does not boot
// guests; run them with `make interop` (root; it installs nothing itself, .ci/run
// does). Each run's capture, both sides' output and the ICRC report are kept in
// artifacts/interop/ (XRNIC_INTEROP_ARTIFACTS overrides).
package interop
