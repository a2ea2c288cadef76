// SPDX-License-Identifier: (MIT OR GPL-2.0-only)

//go:build ignore

// xrnic's XDP program: steers RoCEv2 frames (UDP destination port 4791 over IPv4
// or IPv6, optionally behind one 802.1Q or 802.1ad tag) to the AF_XDP socket bound
// to the receive queue when addressed to the interface's MAC or a multicast MAC, and
// passes everything else to the kernel (ARP, ND, ICMP, TCP, other UDP, other MACs), so the kernel keeps resolving neighbours for us (DESIGN.md,
// "Addresses"). Built with bpf2go (gen.go); the object is committed.
//
// Steered frames have a fixed layout the engine can rely on: Ethernet, at most one
// tag, a 20-byte IPv4 header or a 40-byte IPv6 header, then UDP.
//
// Fault injection, for testing the transport's recovery on the real data path: a
// config map set from Go (bpf.Faults) makes the program drop or corrupt RoCEv2
// frames at seeded rates before they are steered. A verdict delivers a frame at
// most once, so the steering program cannot duplicate.
//
// XDP can multiply a frame, though, and the second program does: xrnic_impair,
// an impairment wire for tests (bpf.AttachImpair) attached to both ports of a
// middle namespace, forwards every frame from one port out of the other with
// bpf_redirect_map. RoCEv2 frames (parsed as above) are dropped, corrupted or
// duplicated at seeded rates; a duplicate is a broadcast redirect into a devmap
// that holds each port twice, excluding the ingress port, which the kernel
// delivers as two frames (clones of the skb in generic mode, of the xdp_frame in
// native mode). The kernel refuses to broadcast a frame with fragments, so the
// single-buffer entry point, which generic mode hands linear frames of any size,
// is the default. A single-buffer and a multi-buffer program cannot share a
// devmap (the kernel refuses to load the second), so Go loads one entry point of
// the wire at a time, and never the whole object at once.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// IANA port of RoCEv2 (IBTA Annex A17.2.1).
#define ROCE_V2_UDP_PORT 4791

// Entries of the XSKMAP: receive queues we can steer. Go reads it from the map.
#define MAX_QUEUES 64

// Fragment bits of iphdr.frag_off (RFC 791), not exported by the UAPI headers.
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

// One 802.1Q / 802.1ad tag after the MAC addresses.
struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

// Counters of one CPU, kept in one PERCPU_ARRAY slot so a frame costs one map
// lookup. Invariant: seen == redirected + passed + dropped_injected; malformed
// frames are also passed, corrupted ones also redirected or passed, and so are
// unsteered ones: RoCEv2 frames passed because no socket is registered at their
// receive queue (the kernel drops them: no listener on 4791). The slot also
// holds the CPU's fault PRNG, so one lookup serves both.
struct counters {
	__u64 seen;
	__u64 redirected;
	__u64 passed;
	__u64 malformed;
	__u64 dropped_injected;
	__u64 corrupted_injected;
	__u64 unsteered;
	__u64 rng;	// xorshift64 state, never 0 once seeded
	__u64 rng_gen; // faults.gen the state was seeded from
};

// Fault injection settings, one ARRAY slot written from Go. A rate is a threshold
// per 2^32: a frame is hit when the top 32 bits of a PRNG draw are below it, so 0
// never and 1<<32 always. Each CPU runs its own xorshift64, seeded from seed and
// the CPU's id whenever gen changes (Go bumps it on every update, so setting the
// same seed again restarts the sequences): what one CPU does to its n-th frame is
// fixed by the seed, how frames spread over CPUs is not.
struct faults {
	__u64 drop;
	__u64 corrupt;
	__u64 seed;
	__u64 gen;
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct faults);
} faults SEC(".maps");

// The interface's own MAC, set from Go when the program is attached
// (bpf.Attach). The kernel drops a unicast frame to another MAC as
// PACKET_OTHERHOST, or gives it to the device that owns that MAC (a macvlan),
// so rxe never sees it: the program steers only RoCEv2 frames to this MAC and
// passes the others. Until it is set (all zeros: a program not attached, as in
// BPF_PROG_TEST_RUN) every destination is steered.
struct self_mac {
	__u8 addr[ETH_ALEN];
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct self_mac);
} self_mac SEC(".maps");

enum frame_kind {
	KIND_OTHER,	 // not RoCEv2: the kernel's
	KIND_ROCE,	 // UDP to 4791, steer
	KIND_MALFORMED, // looks like IP/UDP but the kernel would drop it: count, pass
};

// Where a steered frame's UDP header is and how long the datagram is, for fault
// injection.
struct roce_loc {
	__u32 udp_off; // from the start of the frame
	__u32 udp_len; // UDP header and payload: BTH ... ICRC
};

// classify_udp checks the UDP header at udp; l4len is the IP payload length.
static __always_inline enum frame_kind classify_udp(struct udphdr *udp, void *data_end, __u32 l4len,
						    struct roce_loc *loc)
{
	__u32 ulen;

	if ((void *)(udp + 1) > data_end)
		return KIND_MALFORMED;
	// The kernel's UDP drops the same (__udp4_lib_rcv: "short packet").
	ulen = bpf_ntohs(udp->len);
	if (ulen < sizeof(*udp) || ulen > l4len)
		return KIND_MALFORMED;
	// Only the destination port: a reply *from* 4791 to an ephemeral port is the
	// kernel's (RoCEv2 requests and responses both go to 4791).
	if (udp->dest != bpf_htons(ROCE_V2_UDP_PORT))
		return KIND_OTHER;
	loc->udp_len = ulen;
	return KIND_ROCE;
}

// classify_ipv4 checks the IPv4 header at ip; l3len is the frame's length from ip
// on, fragments included.
static __always_inline enum frame_kind classify_ipv4(struct iphdr *ip, void *data_end, __u64 l3len,
						     struct roce_loc *loc)
{
	__u32 hlen, tot;

	if ((void *)(ip + 1) > data_end)
		return KIND_MALFORMED;
	// Same checks as ip_rcv_core, which would drop these.
	if (ip->version != 4 || ip->ihl < 5)
		return KIND_MALFORMED;
	hlen = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (tot < hlen || tot > l3len)
		return KIND_MALFORMED;
	if (ip->protocol != IPPROTO_UDP)
		return KIND_OTHER;
	// Only the first fragment has the UDP header, and the engine cannot reassemble:
	// leave all fragments to the kernel (PLATFORM pitfall 5; RoCEv2 sets DF).
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return KIND_OTHER;
	// IP options: RoCEv2 senders never emit them, and steering only 20-byte headers
	// keeps the engine's parser at one fixed offset. The kernel gets the odd one out,
	// as with IPv6 extension headers below.
	if (hlen != sizeof(*ip))
		return KIND_OTHER;
	loc->udp_off += sizeof(*ip);
	return classify_udp((void *)(ip + 1), data_end, tot - hlen, loc);
}

// classify_ipv6 checks the IPv6 header at ip6; l3len as for IPv4.
static __always_inline enum frame_kind classify_ipv6(struct ipv6hdr *ip6, void *data_end, __u64 l3len,
						     struct roce_loc *loc)
{
	__u32 plen;

	if ((void *)(ip6 + 1) > data_end)
		return KIND_MALFORMED;
	if (ip6->version != 6)
		return KIND_MALFORMED;
	plen = bpf_ntohs(ip6->payload_len);
	if (sizeof(*ip6) + plen > l3len)
		return KIND_MALFORMED;
	// UDP right after the fixed header only: extension headers (fragment header
	// included) go to the kernel, see the IPv4 options above.
	if (ip6->nexthdr != IPPROTO_UDP)
		return KIND_OTHER;
	loc->udp_off += sizeof(*ip6);
	return classify_udp((void *)(ip6 + 1), data_end, plen, loc);
}

// classify parses the headers in the linear part of the frame with direct packet
// access. Drivers put at least the headers there (veth: 3840 bytes), so a header
// cut at data_end is treated as truncated. For KIND_ROCE it fills loc.
static __always_inline enum frame_kind classify(struct xdp_md *ctx, struct roce_loc *loc)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = bpf_xdp_get_buff_len(ctx); // linear part and fragments
	struct ethhdr *eth = data;
	__u32 l2len = sizeof(*eth);
	__be16 proto;
	void *l3;

	// A runt without a full Ethernet header is not ours; the kernel drops it.
	if ((void *)(eth + 1) > data_end)
		return KIND_OTHER;
	proto = eth->h_proto;
	l3 = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_tag *tag = l3;

		if ((void *)(tag + 1) > data_end)
			return KIND_MALFORMED;
		// One tag only: a second one (QinQ) leaves proto a tag type and the frame
		// goes to the kernel.
		proto = tag->proto;
		l3 = tag + 1;
		l2len += sizeof(*tag);
	}
	loc->udp_off = l2len;
	if (proto == bpf_htons(ETH_P_IP))
		return classify_ipv4(l3, data_end, len - l2len, loc);
	if (proto == bpf_htons(ETH_P_IPV6))
		return classify_ipv6(l3, data_end, len - l2len, loc);
	return KIND_OTHER;
}

// Fault injection.

// Bytes of the base transport header: corruption starts after it, so that a hit
// frame still parses and fails the ICRC check rather than the opcode table.
#define BTH_LEN 12

enum fault {
	FAULT_NONE,
	FAULT_DROP,
	FAULT_CORRUPT,
};

// splitmix64 turns a seed into a well-mixed PRNG state (Steele et al., 2014).
static __always_inline __u64 splitmix64(__u64 z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

// next_rand steps this CPU's xorshift64 (Marsaglia, 2003) kept in *rng, seeding
// it first when the settings changed since it was last seeded (*rng_gen holds the
// generation it was seeded from). Both live in a per-CPU counters slot.
static __always_inline __u64 next_rand(__u64 *rng, __u64 *rng_gen, const struct faults *f)
{
	__u64 x = *rng;

	if (*rng_gen != f->gen || x == 0) {
		x = splitmix64(f->seed + bpf_get_smp_processor_id());
		if (x == 0)
			x = 0x9e3779b97f4a7c15ULL;
		*rng_gen = f->gen;
	}
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*rng = x;
	return x;
}

// inject decides a RoCEv2 frame's fault: one draw for the drop, and for a frame
// that stays, one for the corruption, whose low 32 bits pick the byte. Corruption
// flips one bit (chosen by the first draw's low bits) of one byte after the BTH:
// in extension headers, payload, pad or ICRC, all of which the ICRC covers, so the
// receiver's check must fail (a CRC-32 catches every burst of up to 32 bits).
// bpf_xdp_{load,store}_bytes reach bytes in fragments too, and check bounds.
// rng and rng_gen are next_rand's.
static __always_inline enum fault inject(struct xdp_md *ctx, __u64 *rng, __u64 *rng_gen, const struct faults *f,
					 const struct roce_loc *loc)
{
	__u32 start, span, off;
	__u64 r1, r2;
	__u8 b;

	if (f->drop == 0 && f->corrupt == 0)
		return FAULT_NONE;
	r1 = next_rand(rng, rng_gen, f);
	if ((r1 >> 32) < f->drop)
		return FAULT_DROP;
	if (f->corrupt == 0)
		return FAULT_NONE;
	r2 = next_rand(rng, rng_gen, f);
	if ((r2 >> 32) >= f->corrupt)
		return FAULT_NONE;
	if (loc->udp_len <= sizeof(struct udphdr) + BTH_LEN)
		return FAULT_NONE; // nothing after the BTH to corrupt
	start = loc->udp_off + sizeof(struct udphdr) + BTH_LEN;
	span = loc->udp_len - sizeof(struct udphdr) - BTH_LEN;
	off = start + (__u32)r2 % span;
	if (bpf_xdp_load_bytes(ctx, off, &b, 1))
		return FAULT_NONE;
	b ^= 1 << (r1 & 7);
	if (bpf_xdp_store_bytes(ctx, off, &b, 1))
		return FAULT_NONE;
	return FAULT_CORRUPT;
}

// to_other_mac reports whether the frame is addressed to a unicast MAC other
// than the interface's (self_mac), when that is set. A multicast MAC (the group
// bit) is the engine's: the interface's filter passed it because a QP joined
// its group (rxe_mcast_add's dev_mc_add), and the engine drops groups it has no
// member of, as rxe_rcv_mcast_pkt does.
static __always_inline int to_other_mac(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct self_mac *m;
	__u32 zero = 0;
	__u8 set = 0, diff = 0;
	int i;

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_dest[0] & 1)
		return 0;
	m = bpf_map_lookup_elem(&self_mac, &zero);
	if (!m)
		return 0;
#pragma unroll
	for (i = 0; i < ETH_ALEN; i++) {
		set |= m->addr[i];
		diff |= m->addr[i] ^ eth->h_dest[i];
	}
	return set && diff;
}

static __always_inline int xrnic(struct xdp_md *ctx)
{
	struct roce_loc loc = {};
	enum frame_kind kind = classify(ctx, &loc);
	enum fault fault = FAULT_NONE;
	__u32 zero = 0;
	struct counters *c;
	int verdict = XDP_PASS;
	// Another device's or host's frame is the kernel's, once any fault is
	// injected: a test wire impairs all it sees (interop's drop on a bridge port).
	int other = kind == KIND_ROCE && to_other_mac(ctx);

	// Per-CPU slot: plain increments, no atomics.
	c = bpf_map_lookup_elem(&counters, &zero);
	if (kind == KIND_ROCE) {
		struct faults *f = bpf_map_lookup_elem(&faults, &zero);

		if (c && f)
			fault = inject(ctx, &c->rng, &c->rng_gen, f, &loc);
		if (fault == FAULT_DROP)
			verdict = XDP_DROP;
		else if (!other)
			// The low bits of the flags are the verdict when no socket is at
			// this queue.
			verdict = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	}

	if (c) {
		c->seen++;
		if (verdict == XDP_REDIRECT)
			c->redirected++;
		else if (verdict == XDP_DROP)
			c->dropped_injected++;
		else
			c->passed++;
		if (kind == KIND_MALFORMED)
			c->malformed++;
		if (fault == FAULT_CORRUPT)
			c->corrupted_injected++;
		if (kind == KIND_ROCE && !other && verdict == XDP_PASS)
			c->unsteered++;
	}
	return verdict;
}

// The multi-buffer entry point, the default: RoCE MTU 4096 needs frames of about
// 4150 bytes, which veth only accepts with a frags program (PLATFORM, "What works").
SEC("xdp.frags")
int xrnic_xdp(struct xdp_md *ctx)
{
	return xrnic(ctx);
}

// The single-buffer entry point, for drivers or sockets without multi-buffer
// support; in native mode on veth it caps the peer MTU at 3506.
SEC("xdp")
int xrnic_xdp_single(struct xdp_md *ctx)
{
	return xrnic(ctx);
}

// The impairment wire.

// Ports of the wire: 0 and 1 are the two interfaces, counted per ingress port.
// Frames from any other interface (only a test run can make them) are passed and
// counted in slot IMPAIR_OTHER.
#define IMPAIR_PORTS 2
#define IMPAIR_OTHER 2

// Faults of one direction, set from Go (bpf.Impair.SetFaults): the steering
// program's drop and corrupt settings and PRNG seeding, plus duplicate, a
// threshold per 2^32 like the others.
struct impair_faults {
	struct faults f;
	__u64 duplicate;
};

// Counters of one ingress port on one CPU, with that CPU's PRNG for frames from
// the port. Invariant: seen == forwarded + dropped + no_egress. duplicated,
// dup_refused and corrupted count frames that are also forwarded; roce counts
// the frames that faults could hit.
struct impair_counters {
	__u64 seen;
	__u64 roce;
	__u64 forwarded;
	__u64 duplicated;
	__u64 dup_refused;
	__u64 dropped;
	__u64 corrupted;
	__u64 no_egress;
	__u64 rng;
	__u64 rng_gen;
};

// ingress ifindex -> port.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IMPAIR_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} impair_ports SEC(".maps");

// port -> the other port's ifindex: where its frames go.
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, IMPAIR_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} impair_fwd SEC(".maps");

// Both ports, twice each: a broadcast that excludes the ingress port sends two
// copies out of the other one, whichever port the frame came from.
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 2 * IMPAIR_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} impair_dup SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, IMPAIR_PORTS);
	__type(key, __u32);
	__type(value, struct impair_faults);
} impair_faults SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IMPAIR_PORTS + 1);
	__type(key, __u32);
	__type(value, struct impair_counters);
} impair_counters SEC(".maps");

// impair forwards every frame to the other port; RoCEv2 frames first meet the
// faults of their ingress port: a drop, else a corruption (inject, with the same
// draws as the steering program), then, unless dropped, one more draw for the
// duplicate.
static __always_inline int impair(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->ingress_ifindex, port = IMPAIR_OTHER, *pp;
	struct roce_loc loc = {};
	enum frame_kind kind = KIND_OTHER;
	enum fault fault = FAULT_NONE;
	struct impair_counters *c;
	struct impair_faults *f;
	int dup = 0, refused = 0, verdict;

	pp = bpf_map_lookup_elem(&impair_ports, &ifindex);
	if (pp)
		port = *pp;
	c = bpf_map_lookup_elem(&impair_counters, &port);
	if (!pp) {
		if (c)
			c->seen++;
		return XDP_PASS;
	}

	kind = classify(ctx, &loc);
	if (kind == KIND_ROCE && c) {
		f = bpf_map_lookup_elem(&impair_faults, &port);
		if (f) {
			fault = inject(ctx, &c->rng, &c->rng_gen, &f->f, &loc);
			if (fault != FAULT_DROP && f->duplicate != 0 &&
			    (next_rand(&c->rng, &c->rng_gen, &f->f) >> 32) < f->duplicate)
				dup = 1;
		}
	}
	// The kernel refuses to broadcast a frame with fragments (EOPNOTSUPP, in
	// generic and native mode alike) and would drop it: send it once instead.
	if (dup && bpf_xdp_get_buff_len(ctx) > (__u64)(ctx->data_end - ctx->data)) {
		dup = 0;
		refused = 1;
	}

	if (fault == FAULT_DROP)
		verdict = XDP_DROP;
	else if (dup)
		verdict = bpf_redirect_map(&impair_dup, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
	else
		// No entry: the other port is gone (the kernel removes a devmap entry
		// with its device), and the frame with it.
		verdict = bpf_redirect_map(&impair_fwd, port, XDP_DROP);

	if (c) {
		c->seen++;
		if (kind == KIND_ROCE)
			c->roce++;
		if (fault == FAULT_DROP) {
			c->dropped++;
		} else if (verdict == XDP_REDIRECT) {
			c->forwarded++;
			if (dup)
				c->duplicated++;
			if (refused)
				c->dup_refused++;
			if (fault == FAULT_CORRUPT)
				c->corrupted++;
		} else {
			c->no_egress++;
		}
	}
	return verdict;
}

// The single-buffer entry point, the default. In generic mode the kernel makes
// every frame linear for it, whatever its size, so every frame can be
// duplicated; in native mode on veth it caps the peer MTU at 3506.
SEC("xdp")
int xrnic_impair(struct xdp_md *ctx)
{
	return impair(ctx);
}

// The multi-buffer entry point, for native mode with frames above a page (MTU
// 4096); those frames arrive with fragments and are never duplicated.
SEC("xdp.frags")
int xrnic_impair_frags(struct xdp_md *ctx)
{
	return impair(ctx);
}

char __license[] SEC("license") = "Dual MIT/GPL";
