#!/usr/bin/env python3
"""Checks which send path a fi_pingpong run over the mlx5 model took, from
the model's traces (format: doc/guides/drivers/mlx5.md, "Trace format"),
decoded here from that description and the PRM layout alone.

Usage: mlx5_trace_paths.py <inline|ring|rndv> <size> <iterations> <trace>...

  inline  the messages went as inline data: at least 2 x iterations send
          WQEs with an inline segment of at least <size> bytes, no RDMA read
  ring    they went through the receiver's ring (copied by the send WQEs'
          data segments): send WQEs gathering at least 2 x iterations x
          <size> bytes in all, no RDMA read
  rndv    the receivers fetched them (rendezvous): RDMA read WQEs scattering
          at least 2 x iterations x <size> bytes in all
"""
import struct
import sys

OP_SEND, OP_SEND_IMM, OP_RDMA_READ = 0x0A, 0x0B, 0x10
INLINE = 0x80000000  # MLX5_INLINE_SEG
EXTENDED_UD_AV = 0x80000000


def wqes(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"MLX5TRC1" or struct.unpack_from("<I", data, 8)[0] != 1:
        sys.exit(f"FAIL: {path}: not a version 1 mlx5 model trace")
    off = 16
    while off + 16 <= len(data):
        rtype, length, _queue, _index, _seq = struct.unpack_from("<HHIII", data, off)
        body = data[off + 16 : off + 16 + length]
        if len(body) != length:
            sys.exit(f"FAIL: {path}: record at {off} is cut short")
        off += 16 + (length + 7) // 8 * 8
        if rtype == 1 and length >= 16:
            yield body


def segments(body, first):
    """(byte_count, inline) of the data/inline segments from offset first."""
    off = first
    while off + 4 <= len(body):
        bc = struct.unpack_from(">I", body, off)[0]
        if bc & INLINE:
            n = bc & ~INLINE
            yield n, True
            off += (4 + n + 15) // 16 * 16
        else:
            yield bc, False
            off += 16


def main():
    path, size, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    inline_sends = ring_bytes = read_bytes = reads = 0
    files = sys.argv[4:]
    for t in files:
        for w in wqes(t):
            opcode = struct.unpack_from(">I", w, 0)[0] & 0xFF
            if opcode == OP_RDMA_READ:  # ctrl, remote address, scatter list
                reads += 1
                read_bytes += sum(n for n, inl in segments(w, 32) if not inl)
            elif opcode in (OP_SEND, OP_SEND_IMM):
                # A UD send (the connection messages) has the datagram
                # segment after ctrl: qkey, then dqp_dct with
                # MLX5_EXTENDED_UD_AV set where an RC data segment has the
                # high half of a user address. RC: data or inline segments.
                if len(w) < 32:  # a zero-length send: the control segment alone
                    continue
                first = struct.unpack_from(">I", w, 16)[0]
                if len(w) >= 64 and not first & INLINE and struct.unpack_from(">I", w, 24)[0] & EXTENDED_UD_AV:
                    continue
                segs = list(segments(w, 16))
                if any(inl and n >= size for n, inl in segs):
                    inline_sends += 1
                ring_bytes += sum(n for n, inl in segs if not inl)
    print(f"{len(files)} traces: {inline_sends} inline sends of >= {size} bytes, "
          f"{ring_bytes} bytes gathered by sends, {reads} RDMA reads of {read_bytes} bytes")
    want = 2 * iters * size
    if path == "inline":
        ok = inline_sends >= 2 * iters and reads == 0
    elif path == "ring":
        ok = ring_bytes >= want and reads == 0
    elif path == "rndv":
        ok = read_bytes >= want
    else:
        sys.exit(f"FAIL: unknown path {path}")
    if not ok:
        sys.exit(f"FAIL: the messages of {size} bytes did not take the {path} path")
    print(f"the messages of {size} bytes took the {path} path")


if __name__ == "__main__":
    main()
