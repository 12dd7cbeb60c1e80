#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses (test/fuzz/corpus/<harness>/):
well-formed inputs of the shm layout (layout version 5) and of the vq
provider's wire format and CM messages, from which libFuzzer mutates. Run it again when the
layout changes; inputs the fuzzers found are added beside these by hand."""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def put(harness, name, data):
    d = os.path.join(here, 'corpus', harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


# ---- fuzz-shm-ring: byte 0 = mode (bit 0 lend, bits 1..2 SGEs - 1), then 64-byte slots.
SEND, SEND_IMM, SEND_INV, WRITE_IMM, RNDV = 1, 2, 3, 4, 5
FIRST, LAST, SOL = 1, 2, 4


def slot(op, flags, nslots, length, imm=0, data=b''):
    return struct.pack('<IBBHII', 0, op, flags, nslots, length, imm) + data.ljust(48, b'\x11')[:48]


def slots_for(n):
    return 1 if n <= 48 else 1 + (n - 48 + 63) // 64


def message(op, n, flags=FIRST | LAST, imm=0):
    k = slots_for(n)
    return slot(op, flags, k, n, imm) + b'\x22' * (64 * (k - 1))


ring = {
    'one_slot_send': message(SEND, 16),
    'one_slot_imm': message(SEND_IMM, 48, imm=0x1234),
    'empty_send': message(SEND, 0),
    'multi_slot': message(SEND, 200),
    'two_messages': message(SEND, 8) + message(SEND_IMM, 100),
    'chunked': message(SEND, 112, FIRST) + message(SEND, 112, LAST),
    'write_imm': slot(WRITE_IMM, FIRST | LAST, 1, 4096, 7),
    'send_inv': message(SEND_INV, 8, imm=0x100),
    'rndv': slot(RNDV, FIRST | LAST, 1, 32,
                 data=struct.pack('<B3xII4x', SEND, 64, 1) + struct.pack('<QII', 0, 64, 0)),
    'solicited': message(SEND, 40, FIRST | LAST | SOL),
}
for name, body in ring.items():
    put('fuzz-shm-ring', name, bytes([0]) + body)
    put('fuzz-shm-ring', name + '_sge4', bytes([6]) + body)
put('fuzz-shm-ring', 'lend_small', bytes([1]) + message(SEND, 20))
put('fuzz-shm-ring', 'lend_multi', bytes([1]) + message(SEND_IMM, 300) + message(SEND, 4))

# ---- fuzz-shm-peer: ctx_hdr (192 bytes), qp_desc (192 bytes), qpn (4 bytes).
MAGIC, VERSION, DESC = 0x314d48535154564e, 5, 192


def align(v, a):
    return (v + a - 1) & ~(a - 1)


def header(size=4 << 20, max_qp=1024, max_mr=4096):
    locks = 4096
    mr = locks + 64 * 64
    qp = align(mr + max_mr * 64, 4096)
    heap = align(qp + max_qp * DESC, 4096)
    h = struct.pack('<QIIiIQII', MAGIC, VERSION, 0, 0, max_qp, 0, max_mr, 0)
    h += struct.pack('<QQQQQ', locks, mr, qp, heap, size - heap)
    h = h.ljust(128, b'\0') + b'\0' * 64  # closed: its own line, at 128
    return h, heap


def desc(state, qpn, qtype, ring_off=0, ring_slots=0, ud_nrings=0, ud_off=0, ud_slots=0):
    d = struct.pack('<IIIIIIQII', state, qpn, qtype, 7, 0, 0, ring_off, ring_slots, ud_nrings)
    d += struct.pack('<QIIQ', ud_off, ud_slots, 0, 0)
    return d.ljust(DESC, b'\0')


h, heap = header()
RC, UD = 2, 4
qpn = (1 << 10) | 5
put('fuzz-shm-peer', 'rc_ok', h + desc(0, qpn, RC, heap, 1024) + struct.pack('<I', qpn))
put('fuzz-shm-peer', 'rc_small_ring', h + desc(0, qpn, RC, heap, 64) + struct.pack('<I', qpn))
put('fuzz-shm-peer', 'ud_ok', h + desc(0, qpn, UD, 0, 0, 32, heap, 256) + struct.pack('<I', qpn))
put('fuzz-shm-peer', 'rc_free', h + desc(0xff, qpn, RC, heap, 1024) + struct.pack('<I', qpn))
h2, heap2 = header(max_qp=16, max_mr=16)
put('fuzz-shm-peer', 'small_tables', h2 + desc(0, qpn, RC, heap2, 1024) + struct.pack('<I', qpn))

# ---- fuzz-wire: header word (4), flags (1), then fields / a rendezvous description.
put('fuzz-wire', 'fields_all', struct.pack('>I', 0x01070000) + bytes([7]) + b'\1' * 20)
put('fuzz-wire', 'desc_one', struct.pack('>I', 0x02000000) + bytes([0]) +
    struct.pack('<QII', 100, 1, 0) + struct.pack('<QQII', 0x1000, 100, 5, 0))
put('fuzz-wire', 'desc_four', struct.pack('>I', 0x02000000) + bytes([0]) +
    struct.pack('<QII', 40, 4, 0) + b''.join(struct.pack('<QQII', 0x1000 * i, 10, i, 0) for i in range(4)))

# ---- fuzz-cm: a CM datagram as it arrives (cm_wire.h, cm_msg): op, ep_type,
# datalen, req_qpn, rep_qpn, flags; from and rc_at (qpn, len, 59-byte name);
# clock (40 bytes: a boot id, NUL-padded); then the CM data. The header is
# 184 bytes: anything shorter is refused before any field is read.
REQ, REP, REJ, RTU = 1, 2, 3, 4
EP_MSG, EP_RDM = 1, 3
F_RMA_EVENT, F_ONE_WAY = 1, 2
CM_HDR = 184


def ep_addr(qpn=0, name=b''):
    return struct.pack('<IB', qpn, len(name)) + name.ljust(59, b'\0')


def cm(op, ep_type=0, data=b'', req=0x405, rep=0, flags=0, frm=ep_addr(0x403, b'shunt_1234_0'),
       rc_at=ep_addr(), clock=b''):
    h = struct.pack('<BBHIII', op, ep_type, len(data), req, rep, flags) + frm + rc_at + clock.ljust(40, b'\0')
    assert len(h) == CM_HDR
    return h + data


BOOT_ID = b'0b4f6c3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b'
put('fuzz-cm', 'req_rdm', cm(REQ, EP_RDM))
put('fuzz-cm', 'req_rdm_one_way', cm(REQ, EP_RDM, flags=F_ONE_WAY | F_RMA_EVENT, clock=BOOT_ID))
put('fuzz-cm', 'req_msg_data', cm(REQ, EP_MSG, b'hello, server\0'))
put('fuzz-cm', 'req_msg_rc_at', cm(REQ, EP_MSG, rc_at=ep_addr(0x407, b'shunt_1234_1')))
put('fuzz-cm', 'rep', cm(REP, rep=0x408))
put('fuzz-cm', 'rep_data', cm(REP, rep=0x408, flags=F_RMA_EVENT, data=b'yes\0'))
put('fuzz-cm', 'rej_data', cm(REJ, data=b'no' * 64))
put('fuzz-cm', 'rtu', cm(RTU, req=0x405, rep=0x408))
# Malformed ones the parser must refuse: before it, a REP naming a 200-byte
# sender address overflowed the device address it is copied into, and a REJ
# announcing CM data that did not arrive delivered zeros as that data; an
# rc_at longer than its field, and a header one byte short.
put('fuzz-cm', 'rep_long_from', cm(REP, rep=0x408, frm=struct.pack('<IB', 0x403, 200) + b'x' * 59))
put('fuzz-cm', 'rej_data_missing', cm(REJ, data=b'no' * 64)[:CM_HDR + 4])
put('fuzz-cm', 'rep_long_rc_at', cm(REP, rep=0x408, rc_at=struct.pack('<IB', 0x404, 148) + b'\0' * 59))
put('fuzz-cm', 'req_short_header', cm(REQ, EP_RDM)[:CM_HDR - 1])

# ---- fuzz-ethdev-rx: byte 0 = mode, then frames (2-byte little-endian
# length, bytes). Mode bits: 1 template (the bytes start at the BTH), 2
# append the ICRC, 4 map the QPN (the BTH's last QPN byte mod 4: 0 RC, 1 UC,
# 2 UD, 3 RAW_PACKET), 8 the target's R_Key / Q_Key, 16 PSN = frame index,
# 32 the target's RC QP has requests outstanding, 64 lent receives.
TEMPLATE, ICRC, MAP_QPN, KEYS, PSN_SEQ, BUSY, LEND = 1, 2, 4, 8, 16, 32, 64
FIXED = TEMPLATE | ICRC | MAP_QPN | KEYS | PSN_SEQ
T_RC, T_UC, T_UD, T_RAW = 0, 1, 2, 3


def bth(op, target, psn=0, ackreq=False, pad=0):
    return struct.pack('>BBHB', op, 0x40 | pad << 4, 0xffff, 0) + bytes([0, 0, target]) + \
        bytes([0x80 if ackreq else 0]) + psn.to_bytes(3, 'big')


def reth(off, length):
    return struct.pack('>QII', off, 0, length)


def frames(*fs):
    return b''.join(struct.pack('<H', len(f)) + f for f in fs)


def eth_seed(name, mode, *fs):
    put('fuzz-ethdev-rx', name, bytes([mode]) + frames(*fs))


pay = bytes(range(256))
eth_seed('rc_send_only', FIXED, bth(0x04, T_RC) + pay[:16])
eth_seed('rc_send_two', FIXED, bth(0x00, T_RC) + pay * 4, bth(0x02, T_RC, ackreq=True) + pay[:100])
# Three packets, more than the 2048-byte receive: a local length error.
eth_seed('rc_send_three', FIXED, bth(0x00, T_RC) + pay * 4, bth(0x01, T_RC) + pay * 4,
         bth(0x02, T_RC, ackreq=True) + pay[:100])
eth_seed('rc_send_imm', FIXED, bth(0x05, T_RC) + b'\1\2\3\4' + pay[:32])
eth_seed('rc_send_inv', FIXED, bth(0x17, T_RC) + b'\0\0\0\0' + pay[:8])
eth_seed('rc_write_only', FIXED, bth(0x0a, T_RC, ackreq=True) + reth(4096, 64) + pay[:64])
eth_seed('rc_write_imm', FIXED, bth(0x0b, T_RC) + reth(8192, 32) + b'\0\0\0\7' + pay[:32])
eth_seed('rc_write_two', FIXED, bth(0x06, T_RC) + reth(0, 1100) + pay * 4, bth(0x08, T_RC) + pay[:76])
eth_seed('rc_read', FIXED, bth(0x0c, T_RC) + reth(1024, 3000))
eth_seed('rc_fetch_add', FIXED, bth(0x14, T_RC) + struct.pack('>QIQQ', 64, 0, 3, 0))
eth_seed('rc_cmp_swap', FIXED, bth(0x13, T_RC) + struct.pack('>QIQQ', 128, 0, 9, 0))
# The same atomic twice (PSN 0 both times): the second is a replay.
atomic = bth(0x14, T_RC, ackreq=True) + struct.pack('>QIQQ', 64, 0, 3, 0)
eth_seed('rc_atomic_replayed', FIXED & ~PSN_SEQ, atomic, atomic)
eth_seed('rc_out_of_order', FIXED & ~PSN_SEQ, bth(0x04, T_RC, psn=5) + pay[:8], bth(0x04, T_RC, psn=0) + pay[:8])
eth_seed('rc_ack', FIXED | BUSY, bth(0x11, T_RC, psn=3) + b'\x00\0\0\1')
eth_seed('rc_nak_seq', FIXED | BUSY, bth(0x11, T_RC, psn=1) + b'\x60\0\0\0')
eth_seed('rc_rnr_nak', FIXED | BUSY, bth(0x11, T_RC, psn=0) + b'\x21\0\0\0')
eth_seed('rc_read_resp', FIXED | BUSY, bth(0x0d, T_RC) + b'\0\0\0\0' + pay * 4,
         bth(0x0e, T_RC) + pay * 4, bth(0x0f, T_RC) + b'\0\0\0\1' + pay[:184])
eth_seed('rc_atomic_ack', FIXED | BUSY, bth(0x12, T_RC, psn=2) + b'\0\0\0\3' + struct.pack('>Q', 41))
eth_seed('rc_lent_send', FIXED | LEND, bth(0x04, T_RC) + pay[:40], bth(0x04, T_RC) + pay[:200])
eth_seed('uc_send_and_write', FIXED, bth(0x24, T_UC) + pay[:24], bth(0x2a, T_UC) + reth(512, 16) + pay[:16])
eth_seed('ud_send', FIXED, bth(0x64, T_UD) + struct.pack('>II', 0, 0x000012) + pay[:48])
eth_seed('ud_send_imm', FIXED, bth(0x65, T_UD) + struct.pack('>II', 0, 0x000012) + b'\0\0\0\5' + pay[:20])
eth_seed('bad_icrc', TEMPLATE | MAP_QPN, bth(0x04, T_RC) + pay[:16] + b'\0\0\0\0')
# Whole frames: an ARP request and a plain UDP datagram (for the RAW_PACKET QP).
bcast, mac = b'\xff' * 6, b'\x02\0\0\0\0\1'
arp = bcast + mac + b'\x08\x06' + struct.pack('>HHBBH', 1, 0x0800, 6, 4, 1) + mac + bytes([169, 254, 0, 9]) + \
    b'\0' * 6 + bytes([169, 254, 1, 1])
eth_seed('arp_request', 0, arp)
ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 20 + 8 + 16, 1, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
eth_seed('plain_udp', 0, bcast + mac + b'\x08\x00' + ip + struct.pack('>HHHH', 1234, 5678, 24, 0) + pay[:16])

# ---- fuzz-vq-post: byte 0 = driver (0 shm, 1 ethdev, 2 the mlx5 model), then a program:
# each step an opcode byte (mod 27) and its arguments, read in the order
# fuzz_vq_post.cpp reads them. A builder or setter outside a session opens
# one on the QP named by the next byte (0 RC, 1 UC, 2 UD, 3 RAW_PACKET).
SEND, SEND_IMM, SEND_INV, WRITE, WRITE_IMM, READ, CAS, FAA, TSO = range(9)
SGE, SGE_LIST, INLINE, INLINE_LIST, UD_ADDR, COMPLETE, ABORT = range(9, 16)
POST_SEND, POST_WRITE, POST_IMM_INLINE, POST_IMM_HDR, POST_RECV, POLL = range(16, 22)
FLUSH, BIND_MW, LOCAL_INV = 22, 23, 24  # builders too
PEER_BIND = 25  # the peer binds one of its windows in a session of its own
F_FENCE, F_SIGNALED, F_SOLICITED, F_INLINE, F_IP_CSUM = 1, 2, 4, 8, 16
Q_RC, Q_UC, Q_UD, Q_RAW = range(4)


def u16(v):
    return struct.pack('<H', v)


def local_arg(off, length, small=False, key=0):
    """c: bit 0 the small region, bit 1 a 16-bit length, bits 2..3 the key
    (0 right, 2 another context's, 3 given)."""
    return bytes([(1 if small else 0) | 2 | key << 2]) + u16(off) + u16(length)


def remote_arg(off, small=False, key=0, window=None, stale=False):
    """window: the key of the peer's window 0 or 1 (stale: the one before)."""
    c = (1 if small else 0) | key << 1
    if window is not None:
        c |= 16 | window << 5 | (64 if stale else 0)
    return bytes([c]) + u16(off)


def bind_arg(off, length, access, region=0):
    """c: bits 0..1 the region (0 big, 1 small: no MW_BIND, 2 the third);
    a 16-bit length (0 unbinds), the access bits, the window's next key."""
    return bytes([region]) + u16(off) + u16(length) + bytes([access])


A_REMOTE_WRITE, A_REMOTE_READ, A_REMOTE_ATOMIC = 2, 4, 8


def vq_seed(name, driver, *steps):
    put('fuzz-vq-post', name, bytes([driver]) + b''.join(steps))


for drv, tag in ((0, 'shm'), (1, 'eth'), (2, 'mlx5')):
    # A signaled send of a registered buffer, then a poll.
    vq_seed(tag + '_rc_send', drv, bytes([SEND, Q_RC, F_SIGNALED]), bytes([SGE]) + local_arg(64, 512),
            bytes([COMPLETE, POLL, Q_RC]))
    vq_seed(tag + '_rc_send_imm_inline', drv, bytes([SEND_IMM, Q_RC, F_SIGNALED]) + b'\1\2\3\4',
            bytes([INLINE]) + u16(100), bytes([COMPLETE]))
    vq_seed(tag + '_rc_write_read', drv,
            bytes([WRITE, Q_RC]) + remote_arg(4096) + bytes([F_SIGNALED]), bytes([SGE]) + local_arg(0, 3000),
            bytes([READ]) + remote_arg(4096) + bytes([F_SIGNALED]), bytes([SGE]) + local_arg(8192, 3000),
            bytes([COMPLETE]))
    vq_seed(tag + '_rc_atomics', drv,
            bytes([FAA, Q_RC]) + remote_arg(64) + bytes([F_SIGNALED]) + struct.pack('<Q', 5),
            bytes([SGE]) + local_arg(128, 8),
            bytes([CAS]) + remote_arg(64) + bytes([F_SIGNALED]) + struct.pack('<QQ', 5, 6),
            bytes([SGE]) + local_arg(136, 8), bytes([COMPLETE]))
    vq_seed(tag + '_rc_sge_list', drv, bytes([SEND, Q_RC, F_SIGNALED]),
            bytes([SGE_LIST, 3]) + local_arg(0, 10) + local_arg(90, 10, small=True) + local_arg(500, 1000),
            bytes([COMPLETE]))
    vq_seed(tag + '_rc_past_the_end', drv, bytes([SEND, Q_RC, F_SIGNALED]), bytes([SGE]) + local_arg(65500, 100),
            bytes([COMPLETE]))
    vq_seed(tag + '_rc_wrong_key', drv, bytes([SEND, Q_RC, F_SIGNALED]), bytes([SGE]) + local_arg(0, 64, key=2),
            bytes([COMPLETE]))
    vq_seed(tag + '_uc_write_imm', drv,
            bytes([WRITE_IMM, Q_UC]) + remote_arg(256) + bytes([F_SIGNALED]) + b'\0\0\0\x09',
            bytes([SGE]) + local_arg(0, 200), bytes([COMPLETE]))
    vq_seed(tag + '_ud_send', drv, bytes([SEND, Q_UD, F_SIGNALED]), bytes([UD_ADDR, 3]),
            bytes([SGE]) + local_arg(0, 256), bytes([COMPLETE]))
    # A TSO send on UD: a 54-byte Ethernet/IPv4/TCP header, MSS 512, 3000 bytes.
    vq_seed(tag + '_ud_tso', drv, bytes([TSO, Q_UD]) + u16(54) + u16(512) + bytes([F_SIGNALED | F_IP_CSUM]),
            bytes([UD_ADDR, 3]), bytes([SGE]) + local_arg(0, 3000), bytes([COMPLETE]))
    # A global flush of a range, then of the whole region (type in bits 0..1, level in 2..3).
    vq_seed(tag + '_rc_flush', drv, bytes([FLUSH, Q_RC]) + remote_arg(0) + struct.pack('<IB', 4096, 1) +
            bytes([F_SIGNALED]),
            bytes([FLUSH]) + remote_arg(0) + struct.pack('<IB', 0, 1 | 1 << 2) + bytes([F_SIGNALED]),
            bytes([COMPLETE]))
    vq_seed(tag + '_singles', drv,
            bytes([POST_SEND, Q_RC]) + local_arg(0, 64) + bytes([F_SIGNALED]),
            bytes([POST_SEND, Q_RC]) + local_arg(0, 64) + bytes([F_SIGNALED | F_INLINE]),
            bytes([POST_WRITE, Q_RC]) + local_arg(0, 64) + remote_arg(0) + bytes([F_SIGNALED]),
            bytes([POST_IMM_INLINE, Q_RC, 2]) + u16(16) + u16(40) + b'\0\0\0\1' + bytes([F_SIGNALED]),
            bytes([POST_IMM_HDR, Q_UC]) + u16(24) + b'\0\0\0\2' + struct.pack('<Q', 7) + bytes([0]),
            bytes([POST_RECV, Q_RC, 1]) + local_arg(0, 1024), bytes([POLL, 0]))
    # Memory windows. The peer binds its window 0 over 4 KiB of its region
    # (read and write); we write and read through it, invalidate it with a
    # send and write through it again (an error: the QP fails, so the other
    # errors have seeds of their own).
    peer_bind = bytes([PEER_BIND, 0]) + bind_arg(4096, 4096, A_REMOTE_WRITE | A_REMOTE_READ) + \
        bytes([F_SIGNALED, POLL, 0, POLL, 0])
    vq_seed(tag + '_mw_remote', drv, peer_bind,
            bytes([WRITE, Q_RC]) + remote_arg(4096, window=0) + bytes([F_SIGNALED]),
            bytes([SGE]) + local_arg(0, 1000),
            bytes([READ]) + remote_arg(5000, window=0) + bytes([F_SIGNALED]), bytes([SGE]) + local_arg(2000, 500),
            bytes([COMPLETE, POLL, 0]),
            bytes([SEND_INV, Q_RC]) + remote_arg(0, window=0) + bytes([F_SIGNALED]),
            bytes([SGE]) + local_arg(0, 16), bytes([COMPLETE, POLL, 0]),
            bytes([WRITE, Q_RC]) + remote_arg(4096, window=0) + bytes([F_SIGNALED]),
            bytes([SGE]) + local_arg(0, 8), bytes([COMPLETE, POLL, 0]))
    vq_seed(tag + '_mw_stale_key', drv, peer_bind,
            bytes([WRITE, Q_RC]) + remote_arg(4096, window=0, stale=True) + bytes([F_SIGNALED]),
            bytes([SGE]) + local_arg(0, 64), bytes([COMPLETE, POLL, 0]))
    vq_seed(tag + '_mw_past_the_end', drv, peer_bind,
            bytes([WRITE, Q_UC]) + remote_arg(8000, window=0) + bytes([F_SIGNALED]),
            bytes([SGE]) + local_arg(0, 500), bytes([COMPLETE, POLL, 0]))
    # Our own windows: bind over the region, over the small region (no
    # MW_BIND access), unbind; invalidate a window and a region's key.
    vq_seed(tag + '_mw_local', drv,
            bytes([BIND_MW, Q_RC, 0]) + bind_arg(0, 8192, A_REMOTE_WRITE) + bytes([F_SIGNALED]),
            bytes([BIND_MW, 1]) + bind_arg(0, 50, A_REMOTE_READ, region=1) + bytes([F_SIGNALED]),
            bytes([BIND_MW, 0]) + bind_arg(0, 0, 0) + bytes([F_SIGNALED]),
            bytes([LOCAL_INV, 1, F_SIGNALED]),
            bytes([LOCAL_INV, 0, F_SIGNALED]), bytes([COMPLETE, POLL, 0]))
# RAW_PACKET frames (ethdev): a whole frame, with checksums asked for, and a TSO send.
vq_seed('eth_raw_ip_csum', 1, bytes([SEND, Q_RAW, F_SIGNALED | F_IP_CSUM]), bytes([SGE]) + local_arg(0, 600),
        bytes([COMPLETE]))
vq_seed('eth_raw_tso', 1, bytes([TSO, Q_RAW]) + u16(54) + u16(1000) + bytes([F_SIGNALED]),
        bytes([SGE]) + local_arg(0, 9000), bytes([COMPLETE]))

# ---- fuzz-fi-ep: byte 0 the device, then a program of endpoint calls (see
# the harness for the bytes each call reads). Op byte: bit 0 the side;
# (byte >> 1) % 8: 0 send, 2 receive, 4 RMA, 5 cancel, 6 poll (1 + byte >> 4
# rounds), 7 FI_CLAIM.
EP_SEND, EP_RECV, EP_RMA, EP_CANCEL, EP_POLL, EP_CLAIM = 0, 4, 8, 10, 12, 14
# pick_len: an index into its table (or 0x80 | n: n * 37 bytes).
L0, L8, L64, L_INJ, L_INJ1, L4K, L6K, L64K, L_PAST_MAX = 0, 4, 7, 10, 11, 14, 16, 19, 21
PEER, SELF, REMOVED = 4, 0, 1
FL_COMPLETION, FL_INJECT, FL_CQ_DATA, FL_TRANSMIT, FL_DELIVERY = 1, 2, 4, 8, 16


def ep_send(side, length, tagged=False, form=0, dest=PEER, tag_hi=0, data=0x01020304, flags=0, niov=1, vector=False):
    """form: 0 send, 1 senddata, 2 inject, 3 injectdata, 4 sendv/sendmsg."""
    b = bytes([EP_SEND | side, (form << 1) | int(tagged), length])
    if form == 4:
        b += bytes([niov])
    b += bytes([tag_hi, 0]) + struct.pack('<I', data) + bytes([dest])
    if form == 4:
        b += bytes([flags, int(vector)])
    return b


PEEK_CLAIM, PEEK_DISCARD = 10, 16  # peek forms: FI_PEEK | FI_CLAIM, FI_PEEK | FI_DISCARD


def ep_recv(side, length, form=0, tag_hi=0, tag_lo=0, any_tag=True, niov=1, multi_len=64, flags=0):
    """form % 6: 0 recv, 1 trecv, 2 recvv, 3 multi-receive, 4 peek (form / 6 % 3: 0 FI_PEEK, 1 with FI_CLAIM,
    2 with FI_DISCARD), 5 trecvmsg."""
    b = bytes([EP_RECV | side, form, length])
    if form % 6 == 3:
        b += bytes([multi_len])
    if form % 6 in (2, 5):
        b += bytes([niov])
    b += bytes([1])  # from any source
    b += bytes([tag_hi, 0, tag_lo]) + (bytes([1]) if any_tag else bytes([0, 0]))
    if form % 6 == 3:
        b += bytes([1])
    if form % 6 == 5:
        b += bytes([flags])
    return b


def ep_claim(side, length=0, drop=False, niov=None, completion=False, nothing=False):
    """FI_CLAIM of a claimed message (the side's first): receive it into length bytes (niov buffers), or drop it;
    nothing: FI_CLAIM with a context that claimed nothing."""
    if nothing:
        return bytes([EP_CLAIM | side, 0xf8])
    form = int(drop) | (2 if niov is not None else 0) | (4 if completion else 0)
    b = bytes([EP_CLAIM | side, form, 0, length])
    if niov is not None:
        b += bytes([niov])
    return b


def ep_rma(side, write, length, off, variant=0, key=4, dest=PEER, inject=False, niov=1, flags=0):
    """variant: 0 read/write (inject: inject_write), 1 writedata, 2 readmsg/writemsg."""
    b = bytes([EP_RMA | side, int(write) | (variant << 1) | (8 if inject else 0), length, off >> 8, off & 0xff, key,
               dest])
    if variant == 2:
        b += bytes([niov])
    if variant == 1:
        b += struct.pack('<I', 7)
    if variant == 2:
        b += bytes([1]) + struct.pack('<I', 7) + bytes([flags])
    return b


def ep_atomic(side, kind, dt, op, count, off, right_key=True, dest=PEER):
    """kind: 0 atomic, 1 inject_atomic, 2 fetch_atomic, 3 compare_atomic (an RMA op byte with bit 7 set)."""
    return bytes([EP_RMA | side, 0x80 | (kind << 1), dt, op, count, off, 1 if right_key else 0, dest])


FI_INT32, FI_UINT64, FI_DOUBLE, FI_LONG_DOUBLE_COMPLEX, FI_DATATYPE_LAST = 4, 7, 9, 13, 16
FI_SUM, FI_BXOR, FI_ATOMIC_READ, FI_ATOMIC_WRITE, FI_CSWAP, FI_MSWAP, FI_ATOMIC_OP_LAST = 2, 9, 10, 11, 12, 18, 19


def ep_poll(rounds=1, side=0):
    return bytes([EP_POLL | side | ((rounds - 1) << 4)])


def ep_shutdown(side):
    """MSG endpoints: fi_shutdown (a poll byte of 16 rounds)."""
    return bytes([EP_POLL | side | 0xf0])


ep = {
    'msg_pingpong': ep_recv(1, L64) + ep_send(0, L8) + ep_poll(4) + ep_recv(0, L64) + ep_send(1, L64) + ep_poll(4),
    'tagged_rendezvous': ep_recv(1, L64K, form=1, any_tag=True) + ep_send(0, L64K, tagged=True) + ep_poll(8) +
    ep_send(0, L6K, tagged=True, form=1) + ep_recv(1, L4K, form=1),
    'unexpected_then_matched': ep_send(0, L4K) + ep_send(0, L8, form=2) + ep_poll(8) + ep_recv(1, L4K) +
    ep_recv(1, L8),
    'inject_sizes': ep_send(0, L_INJ - 1, form=2) + ep_send(0, L_INJ, form=3) + ep_send(0, L_INJ1, form=2) +
    ep_recv(1, L4K) + ep_recv(1, L4K) + ep_poll(4),
    'sendmsg_flags': ep_send(1, L4K, form=4, niov=3, flags=FL_COMPLETION | FL_DELIVERY | FL_CQ_DATA) +
    ep_send(1, L64, tagged=True, form=4, niov=2, flags=FL_INJECT | FL_TRANSMIT) + ep_recv(0, L64K, form=2, niov=2) +
    ep_recv(0, L4K, form=5, niov=1),
    'multi_recv': ep_recv(1, 0, form=3, multi_len=40) + ep_send(0, L64) + ep_send(0, L4K) + ep_send(0, L8, form=1) +
    ep_poll(8),
    'peek_and_cancel': ep_send(0, L64, tagged=True) + ep_poll(4) + ep_recv(1, L64, form=4) + ep_poll(2) +
    ep_recv(1, L8, form=1, any_tag=False) + bytes([EP_CANCEL | 1, 0]) + ep_poll(2),
    'peek_claim_receive': ep_send(0, L64, tagged=True) + ep_send(0, L4K, tagged=True) + ep_poll(4) +
    ep_recv(1, L64, form=PEEK_CLAIM) + ep_poll(2) + ep_claim(1, nothing=True) + ep_claim(1, L8, niov=5) +
    ep_claim(1, L64, niov=2) + ep_recv(1, L4K, form=1) + ep_poll(4),
    'peek_claim_drop': ep_send(0, L64, tagged=True) + ep_send(0, L8, tagged=True) + ep_poll(4) +
    ep_recv(1, L64, form=PEEK_CLAIM) + ep_poll(2) + ep_claim(1, drop=True) + ep_recv(1, L64, form=PEEK_DISCARD) +
    ep_poll(2) + ep_recv(1, L8, form=4) + ep_poll(2),
    'peek_claim_rendezvous': ep_send(0, L64K, tagged=True) + ep_poll(8) + ep_recv(1, L64, form=PEEK_CLAIM) +
    ep_poll(2) + ep_claim(1, L4K, completion=True) + ep_poll(8),
    'self_removed_and_past_max': ep_send(0, L8, dest=SELF) + ep_recv(0, L8) + ep_send(0, L8, dest=REMOVED) +
    ep_send(1, L_PAST_MAX) + ep_poll(4),
    'rma_write_read': ep_rma(0, True, L4K, 0) + ep_poll(4) + ep_rma(0, False, L4K, 0x0100) +
    ep_rma(1, True, L64, 0xff00, variant=1) + ep_poll(4),
    'rma_bad_keys_and_bounds': ep_rma(0, True, L64, 0, key=0) + ep_rma(0, False, L64, 0, key=1) +
    ep_rma(0, True, L64K, 0x0200) + ep_rma(1, True, L8, 0, inject=True) + ep_poll(4),
    'atomics': ep_atomic(0, 2, FI_UINT64, FI_SUM, 1, 0) + ep_atomic(1, 3, FI_UINT64, FI_CSWAP, 2, 8) +
    ep_atomic(0, 1, FI_INT32, FI_BXOR, 5, 64) + ep_atomic(1, 0, FI_DOUBLE, FI_ATOMIC_WRITE, 3, 128) +
    ep_atomic(0, 2, FI_LONG_DOUBLE_COMPLEX, FI_ATOMIC_READ, 1, 32) + ep_poll(8),
    'atomics_refused': ep_atomic(0, 0, FI_DATATYPE_LAST, FI_SUM, 1, 0) + ep_atomic(0, 0, FI_UINT64, FI_ATOMIC_OP_LAST,
                                                                                  1, 0) +
    ep_atomic(0, 2, FI_UINT64, FI_SUM, 0, 0) + ep_atomic(0, 3, FI_UINT64, FI_MSWAP, 1, 250) +
    ep_atomic(1, 2, FI_UINT64, FI_SUM, 1, 0, right_key=False) + ep_atomic(1, 0, FI_INT32, FI_SUM, 2, 3) + ep_poll(8),
    'rma_msg_forms': ep_rma(0, True, L6K, 0x1000, variant=2, niov=2, flags=FL_COMPLETION | FL_DELIVERY) +
    ep_rma(0, False, L6K, 0x1000, variant=2, niov=3) + ep_poll(8),
}
msg_ep = {
    'shutdown_mid_flight': ep_recv(1, L4K) + ep_recv(0, L64K, form=1) + ep_send(0, L64K) + ep_send(0, L8) +
    ep_rma(0, True, L4K, 0) + ep_send(1, L64K, tagged=True) + ep_shutdown(0) + ep_send(1, L8) + ep_recv(1, L8) +
    ep_poll(4) + ep_shutdown(0) + ep_shutdown(1),
    'shutdown_by_acceptor': ep_recv(0, L64) + ep_send(1, L8) + ep_poll(2) + ep_shutdown(1) + ep_send(0, L4K) +
    ep_rma(0, False, L64, 0) + ep_poll(4),
}
dgram = {
    'dgram_receives_first': ep_recv(1, L64) + ep_recv(1, L4K, form=1) + ep_send(0, L8) +
    ep_send(0, L_INJ1, tagged=True) + ep_poll(4) + ep_recv(0, L64, form=2, niov=2) + ep_send(1, L64, form=4, niov=2) +
    ep_poll(4),
    'dgram_unreceived_and_past_max': ep_send(0, L64) + ep_send(0, L_PAST_MAX) + ep_send(0, L8, dest=SELF) +
    ep_recv(0, L8) + ep_poll(4) + ep_recv(1, L64) + bytes([EP_CANCEL | 1, 0]) + ep_poll(2),
    'dgram_multi_recv_and_peek': ep_recv(1, 0, form=3, multi_len=40) + ep_send(0, L64) + ep_send(0, L4K) +
    ep_send(0, L8, form=1) + ep_poll(8) + ep_recv(1, L64, form=PEEK_CLAIM) + ep_poll(2),
    'dgram_rma_refused': ep_rma(0, True, L64, 0) + ep_rma(0, False, L64, 0) + ep_atomic(1, 2, FI_UINT64, FI_SUM, 1, 0) +
    ep_poll(2),
}


def sc_send(side, length, ctx, rx=None, tagged=False, form=0, dest=PEER):
    """Scalable endpoints: a send from transmit context ctx to receive context rx of dest (None: unnamed)."""
    return ep_send(side, length, tagged=tagged, form=form, dest=dest) + bytes([0 if rx is None else 2 | rx, ctx])


def sc_recv(side, length, ctx, tagged=False):
    """Scalable endpoints: recv (trecv when tagged, any tag) on receive context ctx."""
    return ep_recv(side, length, form=int(tagged)) + bytes([ctx])


scalable = {
    'scalable_named_contexts': sc_recv(1, L64, 1, tagged=True) + sc_recv(1, L64K, 0) +
    sc_send(0, L8, 0, rx=1, tagged=True) + sc_send(0, L64K, 1) + ep_poll(8) +
    sc_send(1, L4K, 1, rx=1, dest=SELF) + sc_send(0, L_INJ1, 0, rx=0) + ep_poll(4) + sc_recv(1, L4K, 1) +
    sc_recv(1, L4K, 0) + ep_poll(4),
    'scalable_unexpected_on_both': sc_send(0, L64, 1, rx=1) + sc_send(0, L6K, 0, rx=0, tagged=True) +
    sc_send(1, L8, 0, rx=1, form=2) + ep_poll(4) + sc_recv(1, L64, 1) + ep_poll(2),
}
# Byte 0: bit 0 the device (0 shm, 1 ethdev's net_ring pair), bit 1 the CQs
# bound with FI_SELECTIVE_COMPLETION (a few seeds on shm), bit 2 FI_EP_MSG
# endpoints, connected (a few seeds, and the shutdown ones, on both devices),
# bit 3 (without bit 2) FI_EP_DGRAM endpoints, bit 4 (without either)
# scalable RDM endpoints.
for name, data in ep.items():
    put('fuzz-fi-ep', name, bytes([0]) + data)
    put('fuzz-fi-ep', 'eth_' + name, bytes([1]) + data)
for name in ('msg_pingpong', 'sendmsg_flags', 'multi_recv', 'rma_write_read', 'atomics', 'peek_claim_receive'):
    put('fuzz-fi-ep', 'selective_' + name, bytes([2]) + ep[name])
for name in ('msg_pingpong', 'tagged_rendezvous', 'rma_write_read', 'atomics', 'multi_recv'):
    put('fuzz-fi-ep', 'msgep_' + name, bytes([4]) + ep[name])
put('fuzz-fi-ep', 'msgep_eth_msg_pingpong', bytes([5]) + ep['msg_pingpong'])
for name, data in msg_ep.items():
    put('fuzz-fi-ep', 'msgep_' + name, bytes([4]) + data)
    put('fuzz-fi-ep', 'msgep_eth_' + name, bytes([5]) + data)
for name, data in dgram.items():
    put('fuzz-fi-ep', name, bytes([8]) + data)
    put('fuzz-fi-ep', 'eth_' + name, bytes([9]) + data)
put('fuzz-fi-ep', 'selective_dgram_receives_first', bytes([10]) + dgram['dgram_receives_first'])
for name, data in scalable.items():
    put('fuzz-fi-ep', name, bytes([16]) + data)
    put('fuzz-fi-ep', 'eth_' + name, bytes([17]) + data)
put('fuzz-fi-ep', 'selective_scalable_named_contexts', bytes([18]) + scalable['scalable_named_contexts'])
