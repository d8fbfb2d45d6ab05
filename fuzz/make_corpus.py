#!/usr/bin/env python3
"""make_corpus.py - writes the seed corpora of the fuzz targets (fuzz/corpus/NAME/).

Each seed is a short, valid conversation in the record format the harness
documents at its top (fuzz_switch_msg.c, fuzz_client_msg.c); the fuzzer
mutates from there.  Run it from anywhere: python3 fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION = 0x4D434E49, 10
(JOIN, JOIN_ACK, ERROR, HEARTBEAT, LEAVE, POST, DATA, FWD, CREDIT, DONE, PEER_HELLO,
 RING_REDUCE, RING_GATHER, SMALL, SMALL_FWD, PLAN, PEER_PLAN, PEER_ROWS, PEER_PARTIALS,
 PEER_CREDIT, TREE_JOIN, TREE_POST, LL, LL_FWD, PEER_LL, SHRINK, SHRINK_ACK) = range(1, 28)
AG, RS, AR, BARRIER, DISPATCH, COMBINE = range(6)
UINT8, INT32, FLOAT32 = 1, 2, 7
SUM = 0


def hdr(msg, job, rank=0, stream=0, epoch=0, root=0, offset=0, length=0, total=0, sig=0,
        chunk=0, dtype=0, redop=0, status=0):
    """struct inc_wire_hdr, 72 bytes little-endian (base/wire.h)."""
    return struct.pack("<IHBBQQIIQQQQIBBh", MAGIC, VERSION, msg, stream, job, epoch, rank, root,
                       offset, length, total, sig, chunk, dtype, redop, status)


def signature(stream, dtype, redop, sizes):
    """inc_wire_signature (base/wire.c): FNV-1a over the description."""
    h = 0xCBF29CE484222325
    for v in [stream, dtype, redop, len(sizes)] + list(sizes):
        for b in struct.pack("<Q", v):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- switch_msg: records of (c, u16 length, header, payload) -------------------------------
CHUNK = 64  # the harness's --chunk-size


def smsg(conn, h, payload=b"", mode=0):
    return bytes([conn * 8 + mode]) + struct.pack("<H", len(payload)) + h + payload


# The smallest packed UCX worker address (v2, a uuid, no transports): the switch checks a
# JOIN's address with inc_ucx_addr_check.
WORKER_ADDR = b"\x01\x02" + b"rank-adr" + b"\xff"


def join(conn, job, rank, nranks, addr=b"", token=bytes(16)):
    # struct inc_wire_join: nranks, addr_len, timeout_ms and progress_timeout_ms (0: the
    # switch's), token;
    # the harness binds every connection, so any token does.
    payload = struct.pack("<IIII", nranks, len(addr), 0, 0) + token + addr
    return smsg(conn, hdr(JOIN, job, rank=rank, length=len(payload)), payload)


def complete(n=15):
    return bytes([4, n])


def chunks(total):
    off = 0
    while off < total:
        yield off, min(CHUNK, total - off)
        off += CHUNK


def data(conn, job, rank, stream, epoch, root, total, dtype=UINT8, mode=0, sig=1):
    out = b""
    for off, n in chunks(total):
        payload = bytes((off + i) & 0xFF for i in range(n))
        out += smsg(conn, hdr(DATA, job, rank=rank, stream=stream, epoch=epoch, root=root,
                              offset=off, length=n, total=total, sig=sig, chunk=off // CHUNK,
                              dtype=dtype), payload, mode)
    return out


def post(conn, job, rank, stream, epoch, total, dtype=UINT8, sig=1):
    return smsg(conn, hdr(POST, job, rank=rank, stream=stream, epoch=epoch, total=total, sig=sig,
                          dtype=dtype))


def small(conn, job, rank, stream, epoch, sizes, dtype=UINT8, mode=0, sig=None):
    """SMALL: the table of window sizes, then this rank's contribution (wire.h)."""
    if sig is None:
        sig = signature(stream, dtype, SUM, sizes)
    if stream == AG:
        n = sizes[rank]
    elif stream == AR:
        n = sizes[0]
    else:
        n = sum(sizes) - sizes[rank]
    payload = struct.pack("<%dQ" % len(sizes), *sizes) + bytes((rank + i) & 0xFF for i in range(n))
    total = sizes[0] if stream == AR else sizes[rank]
    return smsg(conn, hdr(SMALL, job, rank=rank, stream=stream, epoch=epoch, length=len(payload),
                          total=total, sig=sig, dtype=dtype), payload, mode)


def switch_seeds():
    job = 7
    # AllGather of 2 ranks, 100 bytes each (two chunks), eager copies.
    s = join(0, job, 0, 2) + join(1, job, 1, 2)
    s += post(0, job, 0, AG, 1, 100) + post(1, job, 1, AG, 1, 100)
    s += data(0, job, 0, AG, 1, 0, 100) + data(1, job, 1, AG, 1, 1, 100)
    s += complete() + complete()
    s += smsg(0, hdr(LEAVE, job, rank=0)) + smsg(1, hdr(LEAVE, job, rank=1))
    write("switch_msg", "allgather2", s)
    # ReduceScatter of 3 ranks, float32, 64 bytes a shard, rendezvous data.
    s = join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3)
    for r in range(3):
        s += post(r, job, r, RS, 1, 64, dtype=FLOAT32)
    for r in range(3):
        for root in range(3):
            if root != r:
                s += data(r, job, r, RS, 1, root, 64, dtype=FLOAT32, mode=2)
    s += bytes([5, 15]) + complete() + complete()
    write("switch_msg", "reducescatter3_rndv", s)
    # AllReduce of 2 ranks, int32, data before the posts, kept eager buffers.
    s = join(0, job, 0, 2) + join(1, job, 1, 2)
    s += data(0, job, 0, AR, 1, 0, 96, dtype=INT32, mode=1)
    s += post(0, job, 0, AR, 1, 96, dtype=INT32) + post(1, job, 1, AR, 1, 96, dtype=INT32)
    s += data(1, job, 1, AR, 1, 0, 96, dtype=INT32, mode=1) + complete() + complete()
    write("switch_msg", "allreduce2_kept", s)
    # Barriers of 2 ranks, a heartbeat, a tick, then an ERROR from a rank.
    s = join(0, job, 0, 2) + join(1, job, 1, 2)
    for e in (1, 2):
        s += post(0, job, 0, BARRIER, e, 0) + post(1, job, 1, BARRIER, e, 0)
    s += smsg(1, hdr(HEARTBEAT, job, rank=1)) + bytes([7, 0]) + complete()
    reason = b"rank 1 gave up\0"
    s += smsg(1, hdr(ERROR, job, rank=1, length=len(reason), status=-3), reason)
    write("switch_msg", "barrier_error", s)
    # Two jobs at once, one rank lost mid-collective, a JOIN with an address, liveness ages.
    s = join(0, 1, 0, 2) + join(1, 1, 1, 2) + join(2, 2, 0, 2) + join(3, 2, 1, 2)
    s += post(0, 1, 0, AG, 1, 64) + data(0, 1, 0, AG, 1, 0, 64)
    s += bytes([1 * 8 + 6]) + join(4, 3, 0, 2, addr=WORKER_ADDR)
    s += post(2, 2, 0, AR, 1, 64, dtype=FLOAT32) + bytes([7, 3]) + complete()
    write("switch_msg", "two_jobs_lost", s)
    # Both ranks fall silent before their JOIN_ACKs complete: the job goes, its payload must
    # stay until the sends end.
    s = join(0, job, 0, 2) + join(1, job, 1, 2) + bytes([7, 1]) + complete()
    write("switch_msg", "silent_before_join_ack_sent", s)
    # Small collectives: an AllGather of 3 ranks with an empty window, eager.
    sizes = [8, 0, 16]
    s = join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3)
    for r in range(3):
        s += small(r, job, r, AG, 1, sizes)
    s += complete() + complete()
    write("switch_msg", "small_allgather3", s)
    # A small ReduceScatter of 2 ranks, float32, rendezvous, then a small AllReduce kept eager.
    s = join(0, job, 0, 2) + join(1, job, 1, 2)
    for r in range(2):
        s += small(r, job, r, RS, 1, [8, 16], dtype=FLOAT32, mode=2)
    s += bytes([5, 15]) + complete()
    for r in range(2):
        s += small(r, job, r, AR, 1, [16, 16], dtype=INT32, mode=1)
    s += complete() + complete()
    write("switch_msg", "small_reducescatter_allreduce", s)
    # One rank sends a collective small, the other posts it in chunks: a mismatch.
    s = join(0, job, 0, 2) + join(1, job, 1, 2)
    s += small(0, job, 0, AG, 1, [8, 8])
    s += post(1, job, 1, AG, 1, 8, sig=signature(AG, UINT8, SUM, [8, 8])) + complete()
    write("switch_msg", "small_mixed_forms", s)
    # Sends that complete before the call that makes them returns, as UCX's may: a
    # ReduceScatter of 3 whose data comes before the posts (forwarded while the last POST walks
    # the chunks), one whose data comes after them (the last chunk's send retires it), an
    # AllReduce in kept eager buffers, then a small AllGather.
    s = bytes([4, 64]) + join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3)
    for epoch in (1, 2):
        posts = b"".join(post(r, job, r, RS, epoch, 64, dtype=FLOAT32) for r in range(3))
        chunks_in = b"".join(data(r, job, r, RS, epoch, root, 64, dtype=FLOAT32)
                             for r in range(3) for root in range(3) if root != r)
        s += chunks_in + posts if epoch == 1 else posts + chunks_in
    for r in range(3):
        s += post(r, job, r, AR, 1, 96, dtype=INT32)
    for r in range(3):
        s += data(r, job, r, AR, 1, 0, 96, dtype=INT32, mode=1)
    for r in range(3):
        s += small(r, job, r, AG, 1, [8, 0, 16])
    write("switch_msg", "inline_sends", s)


# --- dispatch and combine (wire.h, "Dispatch and combine") ---------------------------------
class Dc:
    """One dispatch of n ranks and its combine, as the ranks would send them: sets[s][i] is
    row i of rank s's set (an int, bit d for rank d), rows of row_bytes, partials of
    row_count float32."""

    def __init__(self, n, sets, row_bytes, row_count, chunk):
        self.n, self.sets, self.rb, self.rc, self.chunk = n, sets, row_bytes, row_count, chunk
        self.words = (n + 63) // 64

    def count(self, s):
        return [sum(1 for st in self.sets[s] if st >> d & 1) for d in range(self.n)]

    def recvd(self, d):
        return [self.count(s)[d] for s in range(self.n)]

    def per(self, row_bytes):
        return max(1, self.chunk // (row_bytes + 8 * self.words))

    def post(self, s, combine):
        rows = len(self.sets[s])
        pb = 4 * self.rc
        fields = struct.pack("<QQQQQIBBH", rows, pb if combine else self.rb,
                             0 if combine else sum(self.recvd(s)), 1 if combine else 0,
                             self.rc if combine else 0, self.n, FLOAT32 if combine else 0, 0, 0)
        counts = struct.pack("<%dI" % self.n, *self.count(s))
        if combine:
            counts += struct.pack("<%dI" % self.n, *self.recvd(s))
        return fields + counts

    def sets_bytes(self, s, first, k):
        return b"".join(struct.pack("<Q", st) for st in self.sets[s][first:first + k])

    def pieces(self, s, combine):
        """[(root, chunk, offset, total, bytes)] in (chunk, root) order."""
        out = []
        per = self.per(4 * self.rc if combine else self.rb)
        own_chunks = (len(self.sets[s]) + per - 1) // per
        last = own_chunks
        if combine:
            for o in range(self.n):
                rows = [i for i, st in enumerate(self.sets[o]) if o != s and st >> s & 1]
                if rows:
                    last = max(last, rows[-1] // per + 1)
        for c in range(last):
            for root in range(self.n):
                first = c * per
                if root == s and c < own_chunks:
                    k = min(per, len(self.sets[s]) - first)
                    data = self.sets_bytes(s, first, k)
                    if not combine:
                        for i in range(first, first + k):
                            if self.sets[s][i] & ~(1 << s):
                                data += bytes((s * 16 + i + j) & 0xFF for j in range(self.rb))
                    out.append((root, c, first, len(self.sets[s]), data))
                elif combine and root != s:
                    rows = [i for i, st in enumerate(self.sets[root])
                            if st >> s & 1 and first <= i < first + per]
                    if rows:
                        data = b"".join(struct.pack("<%df" % self.rc, *([float(s + 1)] * self.rc))
                                        for _ in rows)
                        out.append((root, c, first, self.recvd(s)[root], data))
        return out

    def sig(self, stream):
        return signature(stream, UINT8, SUM, [0] * self.n)

    def post_msg(self, conn, job, s, combine):
        stream = COMBINE if combine else DISPATCH
        payload = self.post(s, combine)
        return smsg(conn, hdr(POST, job, rank=s, stream=stream, epoch=1, length=len(payload),
                              total=len(self.sets[s]), sig=self.sig(stream)), payload)

    def data_msgs(self, conn, job, s, combine, mode=0):
        stream = COMBINE if combine else DISPATCH
        out = b""
        for root, c, first, total, data in self.pieces(s, combine):
            out += smsg(conn, hdr(DATA, job, rank=s, stream=stream, epoch=1, root=root,
                                  offset=first, length=len(data), total=total, chunk=c,
                                  dtype=FLOAT32 if combine else 0), data, mode)
        return out

    def small_msg(self, conn, job, s, combine, mode=0):
        stream = COMBINE if combine else DISPATCH
        payload = self.post(s, combine)
        for root, c, first, total, data in self.pieces(s, combine):
            payload += struct.pack("<IIQQQ", root, c, first, total, len(data)) + data
            payload += bytes(-len(data) % 8)
        return smsg(conn, hdr(SMALL, job, rank=s, stream=stream, epoch=1, length=len(payload),
                              total=len(self.sets[s]), sig=self.sig(stream)), payload, mode)


def dc_switch_seeds():
    job = 9
    # 2 ranks, 8-byte rows (4 a chunk): rank 0 has five rows, two chunks; rank 1 two.
    dc = Dc(2, [[0b10, 0b11, 0b01, 0b00, 0b10], [0b01, 0b11]], 8, 2, CHUNK)
    base = join(0, job, 0, 2) + join(1, job, 1, 2)
    # Chunked: POSTs, their PLANs, then DATA; then the combine likewise, rendezvous.
    s = base + dc.post_msg(0, job, 0, False) + dc.post_msg(1, job, 1, False)
    s += dc.data_msgs(0, job, 0, False) + dc.data_msgs(1, job, 1, False) + complete() + complete()
    s += dc.post_msg(0, job, 0, True) + dc.post_msg(1, job, 1, True)
    s += dc.data_msgs(0, job, 0, True, mode=2) + dc.data_msgs(1, job, 1, True, mode=2)
    s += bytes([5, 15]) + complete() + complete()
    write("switch_msg", "dispatch_combine2", s)
    # Small (a SMALL's pieces take at most a chunk): rank 1's one row goes to rank 0, as one
    # SMALL each (rank 0's has no piece), rendezvous; the combine likewise, then again with one
    # rank small and the other chunked.
    tiny = Dc(2, [[], [0b01]], 8, 1, CHUNK)
    s = base + tiny.small_msg(0, job, 0, False) + tiny.small_msg(1, job, 1, False, mode=2)
    s += bytes([5, 15]) + complete() + complete()
    s += tiny.small_msg(0, job, 0, True) + tiny.small_msg(1, job, 1, True) + complete()
    write("switch_msg", "dispatch_combine2_small", s)
    # 3 ranks with sends completing inline; a rank's capacity too small fails the plan alone,
    # then a dispatch whose DATA says more rows than its plan.
    dc3 = Dc(3, [[0b111, 0b010], [0b100, 0b001, 0b110], []], 16, 1, CHUNK)
    s = bytes([4, 64]) + join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3)
    for r in range(3):
        s += dc3.post_msg(r, job, r, False)
    for r in range(3):
        s += dc3.data_msgs(r, job, r, False)
    for r in range(3):
        s += dc3.post_msg(r, job, r, True)
    for r in range(3):
        s += dc3.data_msgs(r, job, r, True)
    write("switch_msg", "dispatch_combine3_inline", s)
    # Rank 1 posts one of its two rows for rank 0, then its sets send it both.
    bad = Dc(2, [[0b10], [0b01, 0b00]], 8, 1, CHUNK)
    s = base + bad.post_msg(0, job, 0, False) + bad.post_msg(1, job, 1, False)
    s += bad.data_msgs(0, job, 0, False)
    bad.sets[1] = [0b01, 0b01]
    s += bad.data_msgs(1, job, 1, False) + complete()
    write("switch_msg", "dispatch_more_than_planned", s)


# --- the low-latency form (wire.h, "The low-latency form"; base/ll_wire.h) ----------------
def ll_head(rows, row_bytes, nranks, max_tokens=4, status=0, reason=b"", dispatch_epoch=0,
            row_count=0, dtype=0, redop=0):
    """struct inc_wire_ll (64 bytes), then the refusal's reason padded to 8."""
    head = struct.pack("<QQQQQQIiBBBBHH", rows, row_bytes, max_tokens, dispatch_epoch,
                       row_count, 0, nranks, status, dtype, redop, 0, 0, len(reason), 0)
    return head + reason + bytes(-len(reason) % 8)


def ll_msg(conn, job, rank, stream, epoch, rows, payload, mode=0):
    return smsg(conn, hdr(LL, job, rank=rank, stream=stream, epoch=epoch, length=len(payload),
                          total=rows), payload, mode)


def ll_dispatch(conn, job, s, n, sets, row_bytes, epoch=1, mode=0):
    """Rank s's dispatch LL: its sets (bit d: rank d), then its rows for other ranks."""
    net = [x for x in sets if x & ~(1 << s)]
    payload = ll_head(len(sets), row_bytes, n) + b"".join(struct.pack("<Q", x) for x in sets)
    payload += bytes((s * 16 + i) & 0xFF for i in range(len(net) * row_bytes))
    return ll_msg(conn, job, s, DISPATCH, epoch, len(sets), payload, mode)


def ll_combine(conn, job, d, n, all_sets, epoch=1, mode=0):
    """Rank d's combine LL of one float32 a partial: its own sets, recvd (the rows of each
    owner whose set holds d), then its partials for each owner, ascending."""
    recvd = [0 if o == d else sum(1 for x in all_sets[o] if x >> d & 1) for o in range(n)]
    payload = ll_head(len(all_sets[d]), 4, n, dispatch_epoch=1, row_count=1, dtype=FLOAT32)
    payload += b"".join(struct.pack("<Q", x) for x in all_sets[d])
    payload += struct.pack("<%dI" % n, *recvd) + bytes(-4 * n % 8)
    payload += b"".join(struct.pack("<f", float(d + i)) for i in range(sum(recvd)))
    return ll_msg(conn, job, d, COMBINE, epoch, len(all_sets[d]), payload, mode)


def ll_switch_seeds():
    job = 11
    sets = [[0b11, 0b01], [0b01]]
    base = join(0, job, 0, 2) + join(1, job, 1, 2)
    # A dispatch and its combine of 2 ranks, eager, then rendezvous.
    s = base + ll_dispatch(0, job, 0, 2, sets[0], 8) + ll_dispatch(1, job, 1, 2, sets[1], 8)
    s += complete() + ll_combine(0, job, 0, 2, sets) + ll_combine(1, job, 1, 2, sets)
    s += complete() + complete()
    s += ll_dispatch(0, job, 0, 2, sets[0], 8, epoch=2, mode=2)
    s += ll_dispatch(1, job, 1, 2, sets[1], 8, epoch=2, mode=2) + bytes([5, 15]) + complete()
    s += smsg(0, hdr(LEAVE, job, rank=0)) + smsg(1, hdr(LEAVE, job, rank=1))
    write("switch_msg", "ll_dispatch_combine2", s)
    # 3 ranks with sends completing inline: rank 2 refuses its combine (every rank hears the
    # verdict), an empty dispatch, then rank 1 names another dispatch.
    sets3 = [[0b110], [], [0b011]]
    s = bytes([4, 64]) + join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3)
    for r in range(3):
        s += ll_dispatch(r, job, r, 3, sets3[r], 8)
    s += ll_combine(0, job, 0, 3, sets3) + ll_combine(1, job, 1, 3, sets3)
    refusal = ll_head(0, 4, 3, status=-1, reason=b"no")
    s += ll_msg(2, job, 2, COMBINE, 1, 0, refusal)
    write("switch_msg", "ll_refused_inline3", s)
    # An LL and a POST for the same dispatch: a form mismatch; then an LL_FWD from a rank.
    s = base + ll_dispatch(0, job, 0, 2, sets[0], 8)
    post_payload = struct.pack("<QQQQQIBBH", 2, 8, 4, 0, 0, 2, 0, 0, 0) + struct.pack("<2I", 1, 1)
    s += smsg(1, hdr(POST, job, rank=1, stream=DISPATCH, epoch=1, length=len(post_payload),
                     total=2, sig=1, dtype=UINT8), post_payload) + complete()
    write("switch_msg", "ll_then_post", s)
    s = base + smsg(0, hdr(LL_FWD, job, rank=0, stream=DISPATCH, epoch=1, length=64, total=0),
                    ll_head(0, 8, 2))
    write("switch_msg", "ll_fwd_from_a_rank", s)


def dc_client_seeds():
    job = 0x1234
    # setup: nranks 2, rank 0, credits 2, chunk 64, eager; posts: a dispatch of 3 rows of 8
    # bytes (b1 = 3), sets (1 + i) % 4 (b2 >> 4 = 1), capacity 15; then its combine, rows of
    # 2 float32 (b1 = 1).  Rows 0 and 2 ({0}, {1,0} -> 0b01, 0b11) ... as the harness makes
    # them: row i's set is (1 + i) % 4: 0b01, 0b10, 0b11.
    setup = bytes([0, 0, 1, 7, 0])
    posts = bytes([1]) + bytes([DISPATCH, 3, 0x1F])
    s = setup + posts + bytes([3, 15])
    # PLAN: OK, rank 0 receives 2 rows of its own and 1 of rank 1.
    plan = struct.pack("<iIII", 0, 0, 2, 0) + bytes(256) + struct.pack("<2I", 2, 1)
    s += cmsg(hdr(PLAN, job, rank=0, stream=DISPATCH, epoch=1, length=len(plan)), plan)
    s += bytes([3, 15])
    # Rank 1's row 4 for rank 0 at position 0: its source row, then the row.
    fwd = struct.pack("<I", 4) + bytes(range(8))
    s += cmsg(hdr(FWD, job, rank=0, stream=DISPATCH, epoch=1, root=1, offset=0,
                  length=len(fwd), total=1), fwd)
    s += cmsg(hdr(CREDIT, job, stream=DISPATCH, epoch=1, length=1))
    # The combine: its plan, then rank 0's rows 1 and 2 reduced by rank 1.
    s += bytes([5, COMBINE, 1, 0x00]) + bytes([3, 15])
    plan = struct.pack("<iIII", 0, 0, 2, 0) + bytes(256)
    s += cmsg(hdr(PLAN, job, rank=0, stream=COMBINE, epoch=1, length=len(plan)), plan)
    s += bytes([3, 15])
    red = struct.pack("<4f", 1, 2, 3, 4)
    s += cmsg(hdr(FWD, job, rank=0, stream=COMBINE, epoch=1, root=0, offset=0,
                  length=len(red), total=3, dtype=FLOAT32, redop=SUM), red, mode=2)
    s += bytes([4, 15, 3, 15])
    write("client_msg", "dispatch_combine", s)
    # A plan that fails the dispatch for capacity, then a PLAN nobody awaits.
    s = setup + bytes([1]) + bytes([DISPATCH, 3, 0x10]) + bytes([3, 15])
    reason = b"dispatch epoch 1: rank 0 would receive 3 rows, capacity 0"
    plan = struct.pack("<iIII", -2, 0, 2, 0) + reason + bytes(256 - len(reason))
    plan += struct.pack("<2I", 2, 1)
    s += cmsg(hdr(PLAN, job, rank=0, stream=DISPATCH, epoch=1, length=len(plan), status=-2),
              plan)
    s += cmsg(hdr(PLAN, job, rank=0, stream=DISPATCH, epoch=1, length=len(plan)), plan)
    write("client_msg", "dispatch_capacity_plan", s)


def ll_client_seeds():
    job = 0x1234
    # setup: nranks 2, rank 0, credits 4, chunk 64, eager; a dispatch in the low-latency form
    # (b0 = 4 + 6): one row of 8 bytes for rank 1 (b1 = 1, b2 >> 4 = 2), max_tokens 2.
    setup = bytes([0, 0, 3, 7, 0])
    ll_post = bytes([DISPATCH + 6, 1, 0x20])
    # Rank 1's LL_FWD comes before rank 0 posted: kept, then taken at the start.
    fwd = ll_head(1, 8, 2, max_tokens=2) + struct.pack("<I", 0) + bytes(4) + bytes(range(8))
    s = setup + bytes([0]) + cmsg(hdr(LL_FWD, job, rank=0, stream=DISPATCH, epoch=1, root=1,
                                      length=len(fwd), total=1), fwd)
    s += bytes([5]) + ll_post + bytes([3, 15])
    s += cmsg(hdr(CREDIT, job, stream=DISPATCH, epoch=1, length=2))
    # Its combine of one float32 (b0 = 5 + 6, b1 = 0, b2 = 0): rank 0's row reduced by rank 1.
    s += bytes([5, COMBINE + 6, 0, 0]) + bytes([3, 15])
    res = ll_head(1, 4, 2, max_tokens=2, dispatch_epoch=1, row_count=1, dtype=FLOAT32)
    res += struct.pack("<f", 2.5)
    s += cmsg(hdr(LL_FWD, job, rank=0, stream=COMBINE, epoch=1, root=0, length=len(res),
                  total=1), res, mode=2)
    s += bytes([4, 15]) + cmsg(hdr(CREDIT, job, stream=COMBINE, epoch=1, length=2))
    write("client_msg", "ll_dispatch_combine", s)
    # The switch's verdict on the dispatch (a tree), then an LL_FWD nobody awaits.
    s = setup + bytes([1]) + ll_post + bytes([3, 15])
    why = b"the low-latency form of dispatch and combine does not cross switch trees yet\0"
    s += cmsg(hdr(LL_FWD, job, rank=0, stream=DISPATCH, epoch=1, root=0, length=len(why),
                  status=-10), why)
    s += cmsg(hdr(CREDIT, job, stream=DISPATCH, epoch=1, length=2))
    s += cmsg(hdr(LL_FWD, job, rank=0, stream=COMBINE, epoch=3, root=0, length=len(why),
                  status=-8), why)
    write("client_msg", "ll_verdict", s)


# --- client_msg: setup bytes, then records (see fuzz_client_msg.c) -------------------------
def cmsg(h, payload=b"", mode=0):
    return bytes([mode]) + struct.pack("<H", len(payload)) + h + payload


def client_seeds():
    job = 0x1234  # the harness's job id
    # setup: nranks 2, rank 0, credits 2, chunk 64, rndv threshold byte, then posts:
    # AG stride 64 (b1 = 7), AR 16 float32 (b1 = 15).
    setup = bytes([0, 0, 1, 7, 0])
    posts = bytes([2]) + bytes([AG, 7, 0]) + bytes([AR, 15, 0x70])
    s = setup + posts
    # The AllGather block of rank 1, the AllReduce result, credits back.
    blk = bytes(range(64))
    s += cmsg(hdr(FWD, job, rank=0, stream=AG, epoch=1, root=1, offset=0, length=64, total=64),
              blk)
    vec = struct.pack("<16f", *range(16))
    s += cmsg(hdr(FWD, job, rank=0, stream=AR, epoch=1, offset=0, length=64, total=64,
                  dtype=FLOAT32, redop=SUM), vec, mode=2)
    s += bytes([3, 15, 4, 15])
    for stream in (AG, AR):
        s += cmsg(hdr(CREDIT, job, stream=stream, epoch=1, length=1))
    write("client_msg", "allgather_allreduce", s)
    # ReduceScatter float32 on 3 ranks, rank 1, then a barrier and its DONE, then ERROR.
    setup = bytes([1, 1, 2, 7, 1])
    posts = bytes([2]) + bytes([RS, 7, 0x70]) + bytes([BARRIER, 0, 0])
    s = setup + posts + bytes([3, 15])
    s += cmsg(hdr(FWD, job, rank=1, stream=RS, epoch=1, root=1, offset=0, length=64, total=64,
                  dtype=FLOAT32, redop=SUM), struct.pack("<16f", *([1.0] * 16)))
    s += cmsg(hdr(DONE, job, stream=BARRIER, epoch=1))
    s += cmsg(hdr(HEARTBEAT, job))
    reason = b"rank 2 failed\0"
    s += cmsg(hdr(ERROR, job, rank=2, length=len(reason), status=-3), reason)
    write("client_msg", "reducescatter_barrier_error", s)
    # A second JOIN_ACK, and a FWD nobody posted.
    ack = struct.pack("<IIQII", 2, 2, 64, 10000, 0) + struct.pack("<I", 0) * 2
    s = bytes([0, 1, 1, 7, 0, 0])
    s += cmsg(hdr(JOIN_ACK, job, rank=1, length=len(ack)), ack)
    s += cmsg(hdr(FWD, job, rank=1, stream=AG, epoch=3, root=0, offset=0, length=8, total=8),
              bytes(8))
    write("client_msg", "join_ack_again", s)
    # Small collectives on 3 ranks, rank 1, chunk 64: AllGather of 8-byte blocks, ReduceScatter
    # of 8-byte float32 shards, AllReduce of 4 float32; each answered by one SMALL_FWD.
    setup = bytes([1, 1, 2, 7, 0])
    posts = bytes([3]) + bytes([AG, 0, 0]) + bytes([RS, 0, 0]) + bytes([AR, 3, 0])
    s = setup + posts + bytes([3, 15])
    ag = signature(AG, UINT8, SUM, [8, 8, 8])
    s += cmsg(hdr(SMALL_FWD, job, rank=1, stream=AG, epoch=1, length=16, total=16, sig=ag,
                  dtype=UINT8), bytes(range(16)))
    rs = signature(RS, FLOAT32, SUM, [8, 8, 8])
    s += cmsg(hdr(SMALL_FWD, job, rank=1, stream=RS, epoch=1, length=8, total=8, sig=rs,
                  dtype=FLOAT32, redop=SUM), struct.pack("<2f", 1.0, 2.0))
    ar = signature(AR, FLOAT32, SUM, [16, 16, 16])
    s += cmsg(hdr(SMALL_FWD, job, rank=1, stream=AR, epoch=1, length=16, total=16, sig=ar,
                  dtype=FLOAT32, redop=SUM), struct.pack("<4f", *range(4)), mode=2)
    s += bytes([4, 15])
    write("client_msg", "small_collectives", s)


# --- shrink (wire.h, SHRINK and SHRINK_ACK) ------------------------------------------------
def shrink_switch_seeds():
    job = 7
    # Rank 2 of 3 lost, the others shrink; sends complete; the lost rank's slot joins again.
    s = join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3) + complete()
    s += bytes([2 * 8 + 6]) + complete()
    s += smsg(0, hdr(SHRINK, job, rank=0)) + smsg(1, hdr(SHRINK, job, rank=1)) + complete()
    s += join(2, job, 2, 3) + complete() + smsg(0, hdr(SHRINK, job, rank=0)) + complete()
    write("switch_msg", "shrink_after_loss", s)
    # On request with nobody lost, then everyone leaves.
    s = join(0, job, 0, 2) + join(1, job, 1, 2) + complete()
    s += smsg(1, hdr(SHRINK, job, rank=1)) + smsg(0, hdr(SHRINK, job, rank=0)) + complete()
    s += smsg(0, hdr(LEAVE, job, rank=0)) + smsg(1, hdr(LEAVE, job, rank=1)) + complete()
    write("switch_msg", "shrink_on_request", s)
    # A rank lost without asking while the shrink is under way (left out), a SHRINK naming
    # another rank, a tick.
    s = join(0, job, 0, 4) + join(1, job, 1, 4) + join(2, job, 2, 4) + join(3, job, 3, 4)
    s += complete() + bytes([3 * 8 + 6]) + smsg(0, hdr(SHRINK, job, rank=0))
    s += bytes([2 * 8 + 6]) + smsg(1, hdr(SHRINK, job, rank=0)) + complete()
    s += smsg(1, hdr(SHRINK, job, rank=1)) + bytes([7, 1]) + complete() + complete()
    write("switch_msg", "shrink_second_loss", s)
    # An asker lost before the answer: the shrink fails for good, a later ask hears why.
    s = join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3) + complete()
    s += smsg(0, hdr(SHRINK, job, rank=0)) + bytes([0 * 8 + 6]) + complete()
    s += smsg(1, hdr(SHRINK, job, rank=1)) + complete() + bytes([7, 1]) + complete()
    write("switch_msg", "shrink_asker_lost", s)
    # An asker leaves in order and goes before the others asked: not numbered (fuzzing found
    # its slot answered through a connection that was gone).
    s = join(0, job, 0, 3) + join(1, job, 1, 3) + join(2, job, 2, 3) + complete()
    s += smsg(0, hdr(SHRINK, job, rank=0)) + smsg(0, hdr(LEAVE, job, rank=0)) + bytes([0 * 8 + 6])
    s += smsg(1, hdr(SHRINK, job, rank=1)) + smsg(2, hdr(SHRINK, job, rank=2)) + complete()
    write("switch_msg", "shrink_asker_left", s)
    # A SHRINK before the job formed.
    s = join(0, job, 0, 2) + smsg(0, hdr(SHRINK, job, rank=0)) + complete()
    write("switch_msg", "shrink_forming", s)
    # A job over a tree: its rank's SHRINK is unsupported, the child switch's breaks the job.
    s = join(0, job, 0, 2, WORKER_ADDR) + tree_join(5, job, 2, [1]) + complete()
    s += smsg(0, hdr(SHRINK, job, rank=0)) + complete()
    s += smsg(5, hdr(SHRINK, job, rank=1)) + complete() + complete()
    write("switch_msg", "shrink_over_a_tree", s)


def shrink_client_seeds():
    job = 0x1234
    ok = struct.pack("<QII", 0x77, 0, 2) + bytes(256)
    reason = b"rank 2 of job 4660 was lost while the job shrank"
    failed = struct.pack("<QII", 0, 0, 0) + reason + bytes(256 - len(reason))
    s = bytes([0, 0, 1, 7, 0, 0])
    s += cmsg(hdr(SHRINK_ACK, job, length=len(ok)), ok)
    s += cmsg(hdr(SHRINK_ACK, job, length=len(failed), status=-3), failed)
    write("client_msg", "shrink_ack_unasked", s)


def tree_join(conn, job, nranks, ranks, addr=WORKER_ADDR, window=64):
    """TREE_JOIN from a child switch: struct inc_wire_tree_join, then (rank, length, address)."""
    payload = struct.pack("<IIII", nranks, len(ranks), 0, 0) + bytes(16)
    payload += struct.pack("<II", window, 0)
    for r in ranks:
        payload += struct.pack("<II", r, len(addr)) + addr
    return smsg(conn, hdr(TREE_JOIN, job, rank=ranks[0], length=len(payload)), payload)


def tree_post(conn, job, key, stream, epoch, sizes, sig=1, dtype=UINT8):
    payload = struct.pack("<%dQ" % len(sizes), *sizes)
    return smsg(conn, hdr(TREE_POST, job, rank=key, stream=stream, epoch=epoch,
                          length=len(payload), sig=sig, dtype=dtype), payload)


def join_ack(conn, job, nranks, credits=3, addr=WORKER_ADDR):
    payload = struct.pack("<IIQII", nranks, credits, CHUNK, 10000, 0) + bytes(16)
    for _ in range(nranks):
        payload += struct.pack("<I", len(addr)) + addr
    return smsg(conn, hdr(JOIN_ACK, job, length=len(payload)), payload)


def tree_seeds():
    """The switch as a root with a child switch (conn 0: ranks 0 and 1) and a rank (conn 1)."""
    job = 11
    s = tree_join(0, job, 3, [0, 1]) + join(1, job, 2, 3, WORKER_ADDR) + complete()
    sizes = [80, 80, 80]
    sig = signature(AG, UINT8, SUM, sizes)
    s += tree_post(0, job, 0, AG, 1, [80, 80, 0], sig) + post(1, job, 2, AG, 1, 80, sig=sig)
    s += data(0, job, 0, AG, 1, 0, 80, sig=sig) + complete() + complete()
    s += data(0, job, 0, AG, 1, 1, 80, sig=sig) + complete() + complete()
    s += data(1, job, 2, AG, 1, 2, 80, sig=sig) + complete() + complete()
    sizes = [16, 16, 16]
    sig = signature(RS, INT32, SUM, sizes)
    s += tree_post(0, job, 0, RS, 1, [16, 16, 0], sig, INT32) + post(1, job, 2, RS, 1, 16, INT32, sig)
    s += data(0, job, 0, RS, 1, 2, 16, INT32, sig=sig) + data(1, job, 2, RS, 1, 0, 16, INT32, sig=sig)
    s += data(1, job, 2, RS, 1, 1, 16, INT32, sig=sig) + complete() + complete()
    # A small AllReduce: the child's SMALL carries its side's vector behind the table.
    sizes = [8, 8, 8]
    payload = struct.pack("<3Q", *sizes) + bytes(range(8))
    s += smsg(0, hdr(SMALL, job, rank=0, stream=AR, epoch=1, length=len(payload), total=8,
                     sig=signature(AR, INT32, SUM, sizes), dtype=INT32), payload)
    s += small(1, job, 2, AR, 1, sizes, INT32) + complete() + bytes([7, 0])
    write("switch_msg", "tree_root_child_and_rank", s)


def child_formed(job):
    """Ranks 0 and 1 join the child, and the parent (connection 5) acknowledges the job of 3."""
    s = join(0, job, 0, 3, WORKER_ADDR) + join(1, job, 1, 3, WORKER_ADDR) + complete()
    return s + join_ack(5, job, 3) + complete()


def parent_fwds(job, stream, root, total, sig, dtype):
    """The parent's FWDs of stream's epoch 1 for root, total bytes in chunks."""
    s = b""
    for off, n in chunks(total):
        s += smsg(5, hdr(FWD, job, rank=0, stream=stream, epoch=1, root=root, offset=off, length=n,
                         total=total, sig=sig, chunk=off // CHUNK, dtype=dtype), bytes(n))
    return s


def parent_set_chunks(job, dc, owner):
    """The parent's FWDs of owner's combine set chunks (epoch 1), in chunk order."""
    per, rows, s = dc.per(4 * dc.rc), len(dc.sets[owner]), b""
    for c in range((rows + per - 1) // per):
        k = min(per, rows - c * per)
        data = dc.sets_bytes(owner, c * per, k)
        s += smsg(5, hdr(FWD, job, rank=0, stream=COMBINE, epoch=1, root=owner, offset=c * per,
                         length=len(data), total=rows, sig=dc.sig(COMBINE), chunk=c,
                         dtype=FLOAT32), data)
    return s


def tree_child_seeds():
    """The switch as a child (fuzz_switch_child): ranks 0 and 1 here, rank 2 beyond the parent,
    which speaks on the last connection (5) once the first rank joined."""
    job = 12
    s = child_formed(job)
    sizes = [80, 80, 80]
    sig = signature(AG, UINT8, SUM, sizes)
    s += post(0, job, 0, AG, 1, 80, sig=sig) + post(1, job, 1, AG, 1, 80, sig=sig)
    s += tree_post(5, job, 2, AG, 1, [0, 0, 80], sig)
    s += data(0, job, 0, AG, 1, 0, 80, sig=sig) + data(1, job, 1, AG, 1, 1, 80, sig=sig)
    s += parent_fwds(job, AG, 2, 80, sig, UINT8)
    s += complete() + complete()
    s += smsg(5, hdr(CREDIT, job, stream=AG, epoch=1, length=2)) + complete()
    sizes = [8, 8, 8]
    s += small(0, job, 0, AR, 1, sizes, INT32) + small(1, job, 1, AR, 1, sizes, INT32)
    s += complete()
    s += smsg(5, hdr(SMALL_FWD, job, stream=AR, epoch=1, length=8, total=8,
                     sig=signature(AR, INT32, SUM, sizes), dtype=INT32), bytes(8))
    s += complete() + bytes([7, 1])
    write("switch_child", "tree_child_two_ranks_and_parent", s)

    # The parent sends a third AllGather chunk while the child's window of 2 (the harness's
    # --link-window) is spent: the child fails the job.
    s = child_formed(job)
    sizes = [0, 0, 192]
    sig = signature(AG, UINT8, SUM, sizes)
    s += post(0, job, 0, AG, 1, 0, sig=sig) + post(1, job, 1, AG, 1, 0, sig=sig)
    s += tree_post(5, job, 2, AG, 1, [0, 0, 192], sig)
    s += parent_fwds(job, AG, 2, 192, sig, UINT8)
    s += complete() + complete() + bytes([7, 1])
    write("switch_child", "tree_child_parent_past_its_window", s)

    # The parent sends a third ReduceScatter partial of rank 0 while that owner's window of 2
    # is spent (wire 9: a window per owner): the child fails the job.
    s = child_formed(job)
    sizes = [192, 192, 192]
    sig = signature(RS, FLOAT32, SUM, sizes)
    s += post(0, job, 0, RS, 1, 192, dtype=FLOAT32, sig=sig)
    s += post(1, job, 1, RS, 1, 192, dtype=FLOAT32, sig=sig)
    s += tree_post(5, job, 2, RS, 1, [0, 0, 192], sig, dtype=FLOAT32)
    s += parent_fwds(job, RS, 0, 192, sig, FLOAT32)
    s += complete() + complete() + bytes([7, 1])
    write("switch_child", "tree_child_parent_partials_past_the_owners_window", s)

    # A combine through the child (wire 10): rank 2's set chunks come down from the parent,
    # the child reduces its ranks' partials of them and sends the parent each partial and a
    # CREDIT naming rank 2; its own ranks' last set chunks go up, the parent's CREDITs return.
    s = child_formed(job)
    dc = Dc(3, [[0b001], [0b010], [0b001, 0b011, 0b010, 0b001, 0b011]], 8, 2, CHUNK)
    s += dc.post_msg(0, job, 0, True) + dc.post_msg(1, job, 1, True)
    s += dc.post_msg(5, job, 2, True) + complete()
    s += parent_set_chunks(job, dc, 2) + complete()
    s += dc.data_msgs(0, job, 0, True) + dc.data_msgs(1, job, 1, True) + complete() + complete()
    for owner in (0, 1):
        s += smsg(5, hdr(CREDIT, job, stream=COMBINE, epoch=1, root=owner, length=1))
    s += complete() + bytes([7, 1])
    write("switch_child", "tree_child_combine_through_the_window", s)

    # The parent sends a third set chunk of rank 2 while that owner's window of 2 is spent
    # (its ranks have sent no partials, so the first two are not done): the child fails the job.
    s = child_formed(job)
    dc = Dc(3, [[], [], [0b001] * 12], 8, 2, CHUNK)
    s += dc.post_msg(0, job, 0, True) + dc.post_msg(1, job, 1, True)
    s += dc.post_msg(5, job, 2, True) + complete()
    s += parent_set_chunks(job, dc, 2) + complete() + bytes([7, 1])
    write("switch_child", "tree_child_parent_set_chunks_past_the_owners_window", s)


if __name__ == "__main__":
    switch_seeds()
    dc_switch_seeds()
    ll_switch_seeds()
    shrink_switch_seeds()
    tree_seeds()
    tree_child_seeds()
    client_seeds()
    dc_client_seeds()
    ll_client_seeds()
    shrink_client_seeds()
