// Allocation checks and benchmarks of the hot paths.

package wire

import "testing"

func TestNoAllocs(t *testing.T) {
	small := mustBuild(t, sampleFields(RCSendOnly, 4, 64))
	big := mustBuild(t, sampleFields(RCRDMAWriteOnly, 6, 4096))
	bad := mustBuild(t, sampleFields(RCSendOnly, 4, 64))
	bad[ibOff4] = 0x18 // unknown opcode
	badICRC := mustBuild(t, sampleFields(RCSendOnly, 4, 64))
	badICRC[len(badICRC)-1] ^= 1
	var p Packet
	f := sampleFields(RCRDMAWriteFirst, 4, 1024)
	buf := make([]byte, f.Len())
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"ParseAndVerify 64", func() { _ = ParseAndVerify(small, &p) }},
		{"ParseAndVerify 4K", func() { _ = ParseAndVerify(big, &p) }},
		{"Parse error", func() { _ = Parse(bad, &p) }},
		{"ICRC error", func() { _ = ParseAndVerify(badICRC, &p) }},
		{"Encode", func() { _, _ = f.Encode(buf) }},
		{"Fields", func() {
			_ = Parse(small, &p)
			var g FrameFields
			p.Fields(&g)
		}},
		{"UpdateICRC", func() { _ = Parse(small, &p); p.UpdateICRC() }},
	} {
		if n := testing.AllocsPerRun(100, tc.fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tc.name, n)
		}
	}
}

func benchParseVerify(b *testing.B, payload int) {
	frame := mustBuild(b, sampleFields(RCSendOnly, 4, payload))
	var p Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseAndVerify(frame, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseVerify4K parses and checks the ICRC of a 4 KiB-payload packet.
func BenchmarkParseVerify4K(b *testing.B) { benchParseVerify(b, 4096) }

// BenchmarkParseVerify64 parses and checks the ICRC of a 64-byte-payload packet.
func BenchmarkParseVerify64(b *testing.B) { benchParseVerify(b, 64) }

// BenchmarkParse64 is the parse alone, without the ICRC.
func BenchmarkParse64(b *testing.B) {
	frame := mustBuild(b, sampleFields(RCSendOnly, 4, 64))
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(frame, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func benchEncode(b *testing.B, payload int) {
	f := sampleFields(RCRDMAWriteOnly, 4, payload)
	buf := make([]byte, f.Len())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Encode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode4K builds a whole 4 KiB-payload frame: copy, checksum, ICRC.
func BenchmarkEncode4K(b *testing.B) { benchEncode(b, 4096) }

// BenchmarkEncode64 builds a whole 64-byte-payload frame.
func BenchmarkEncode64(b *testing.B) { benchEncode(b, 64) }

// benchICRCInPlace is the ICRC pass alone, as the engine runs it on every
// frame it sends and receives.
func benchICRCInPlace(b *testing.B, op Opcode, payload int) {
	frame := mustBuild(b, sampleFields(op, 4, payload))
	var p Packet
	if err := Parse(frame, &p); err != nil {
		b.Fatal(err)
	}
	ip := frame[len(p.Ethernet)+len(p.VLAN) : len(p.Frame)-ICRCLen]
	for b.Loop() {
		if _, ok := ICRCInPlace(ip, IPv4Len); !ok {
			b.Fatal("ICRCInPlace refused the frame")
		}
	}
}

// BenchmarkICRCWrite64 is a 64-byte WRITE Only (120 bytes covered: a tail of
// 8 past hash/crc32's folding).
func BenchmarkICRCWrite64(b *testing.B) { benchICRCInPlace(b, RCRDMAWriteOnly, 64) }

// BenchmarkICRCAck is an ACK (44 bytes covered, under hash/crc32's folding).
func BenchmarkICRCAck(b *testing.B) { benchICRCInPlace(b, RCAcknowledge, 0) }

// BenchmarkCopyCRC is a sender's payload step: 4 KiB out of a memory region
// into one of a batch's frame buffers (64, more than L1 holds) and its CRC,
// as a copy and then a pass (copy-then-crc), or folded in the copy. The
// payload starts 58 bytes into the frame (Ethernet, IPv4, UDP, BTH, RETH).
func BenchmarkCopyCRC(b *testing.B) {
	src := make([]byte, 64<<10)
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 4096+100)[58:]
	}
	for _, fold := range []bool{false, true} {
		name := "copy-then-crc"
		if fold {
			name = "fold"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(4096)
			var crc uint32
			i := 0
			for b.Loop() {
				d, s := bufs[i%len(bufs)], src[i%16*4096:][:4096]
				if fold {
					crc = CopyUpdateIEEE(crc, d, s)
				} else {
					copy(d, s)
					crc = updateIEEE(crc, d)
				}
				i++
			}
		})
	}
}
