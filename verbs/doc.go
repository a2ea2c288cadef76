// Package verbs will hold xrnic's libibverbs-shaped Go API (devices, PDs, MRs, CQs,
// QPs, SRQs, AHs, work requests and completions) and RDMA-CM-style connection setup,
// obeying the Linux IB midlayer rules (shared/reference/ib-midlayer-locking.txt).
//
// It arrives with the engine-and-verbs issue; the wire codec (nic/wire) and the data
// path (bpf, nic/xsk, nic/link) it sits on are here.
package verbs
