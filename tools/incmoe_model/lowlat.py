"""The low-latency form of dispatch and combine (base/wire.h, "The low-latency form of
dispatch and combine"): its messages, their bytes per rank and link direction, and its time.

In-network (inc), for T tokens per rank (u: rows whose set holds another rank, inn: rows a
rank receives, from the routing statistics):
  dispatch  each rank sends one LL up: its sets (T x 8W bytes) and its u rows; the switch
            forwards each source's rows to every other rank as soon as that source's LL has
            arrived, one LL_FWD per (source, receiver), n = 0 included, each with n 4-byte
            source rows (padded to 8) and the n rows.
  combine   each rank sends one LL up: its sets again, N 4-byte counts (padded to 8) and its
            inn partials; the switch waits for every rank's, reduces, and sends each owner one
            LL_FWD holding its u reduced rows.
Point to point (a2a, ring): each rank sends one PEER_LL to every other rank (rows for it or
not): in dispatch its rows for that rank with their source rows, in combine the partials of
the rows it received from it.  Every message carries the header (72 bytes) and the form's
description (64), struct inc_wire_hdr and struct inc_wire_ll.

Time.  A decode loop's steps drain a shaped link's token bucket, so every byte is charged at
the rate (efficiency x rate), no burst.  The switch stores and forwards each message: a
receiver's forwards start once the sources' LLs are in (all ranks send at once, so the
busiest sender's) and follow each other on its down link; a combine's results leave once
every rank's LL is in.  So, with U and D the busiest rank's bytes up and down, a dispatch or
a combine takes 2 hops + U + D at the rate, plus the switch's work (--switch-msg-cost per
message, --switch-byte-cost per byte in or out, one process: serial); dispatch || combine
(the dispatch posted first) takes 2 hops + Ud + max(Uc, Dd) + Dc.  Point to point the
messages stream through the switch's host with no process on the path: one hop, --msg-cost
per message a rank sends, and the busier direction at the rate.  Bound, as incmoe-perf's:
the busiest rank and direction's bytes / link rate.
"""

import math

from .presets import ModelError
from .flows import ALGOS, MASKED_OPS


WIRE_HDR_BYTES = 72  # struct inc_wire_hdr
WIRE_LL_BYTES = 64  # struct inc_wire_ll
MSG_BYTES = WIRE_HDR_BYTES + WIRE_LL_BYTES


def pad8(n):
    return 8 * math.ceil(n / 8)


class LLTraffic:
    """The bytes of a low-latency dispatch (up_d, down_d) and combine (up_c, down_c), lists
    by rank, the messages a rank sends in each (sends) and the largest one's bytes (largest:
    dispatch, combine)."""

    def __init__(self, up_d, down_d, up_c, down_c, sends, largest):
        self.up_d, self.down_d, self.up_c, self.down_c = up_d, down_d, up_c, down_c
        self.sends, self.largest = sends, largest


def ll_traffic(algo, p, stats, dispatch_row=None, combine_row=None):
    """The bytes per rank of a low-latency dispatch and combine of p.tokens rows per rank:
    rows of dispatch_row bytes out, partials of combine_row bytes back (default p.row)."""
    if algo not in ALGOS:
        raise ModelError(f"--algo {algo}: expected one of {', '.join(ALGOS)}")
    Rd = p.row if dispatch_row is None else dispatch_row
    Rc = p.row if combine_row is None else combine_row
    N, T = p.N, p.tokens
    u, out, inn = stats.rows(T)
    if N == 1:
        zero = [0.0]
        return LLTraffic(zero, zero, zero, zero, 0, (0.0, 0.0))
    sets = T * 8 * math.ceil(N / 64)
    if algo == "inc":
        up_d = [MSG_BYTES + sets + x * Rd for x in u]
        down_d = [(N - 1) * MSG_BYTES + 4 * i + i * Rd for i in inn]
        up_c = [MSG_BYTES + sets + pad8(4 * N) + i * Rc for i in inn]
        down_c = [MSG_BYTES + x * Rc for x in u]
        return LLTraffic(up_d, down_d, up_c, down_c, 1, (max(up_d), max(up_c)))
    up_d = [(N - 1) * MSG_BYTES + 4 * o + o * Rd for o in out]
    down_d = [(N - 1) * MSG_BYTES + 4 * i + i * Rd for i in inn]
    up_c = [(N - 1) * MSG_BYTES + i * Rc for i in inn]
    down_c = [(N - 1) * MSG_BYTES + o * Rc for o in out]
    # A rank's rows to one peer: its share of what it sends to all (the routing statistics
    # are expectations, alike for every peer).
    largest = (MSG_BYTES + max(out) / (N - 1) * (Rd + 4), MSG_BYTES + max(inn) / (N - 1) * Rc)
    return LLTraffic(up_d, down_d, up_c, down_c, N - 1, largest)


class LLTiming:
    """One low-latency collective's time: total = hops + links (+ the switch's work on
    inc), with the bytes behind it, incmoe-perf's bound, and the credits its largest message
    takes (credits; a message over the job's credits is refused, base/wire.h: fits)."""

    def __init__(self, op, algo, p, tr):
        largest = {"dispatch": tr.largest[0], "combine": tr.largest[1],
                   "dc": max(tr.largest)}[op]
        self.credits = max(1, math.ceil(largest / p.chunk))
        self.fits = self.credits <= p.credits
        rate = p.efficiency * p.rate_bps / 8
        Ud, Dd, Uc, Dc = (max(x) for x in (tr.up_d, tr.down_d, tr.up_c, tr.down_c))
        up = {"dispatch": tr.up_d, "combine": tr.up_c,
              "dc": [a + b for a, b in zip(tr.up_d, tr.up_c)]}[op]
        down = {"dispatch": tr.down_d, "combine": tr.down_c,
                "dc": [a + b for a, b in zip(tr.down_d, tr.down_c)]}[op]
        self.up, self.down = up, down
        self.busiest = max(max(up), max(down))
        self.bound = self.busiest / (p.rate_bps / 8)
        if p.N == 1:
            self.hops = self.switch = self.links = self.total = 0.0
            return
        if algo == "inc":
            self.hops = 2 * p.latency_s
            sw_share = {"dispatch": (tr.up_d, tr.down_d), "combine": (tr.up_c, tr.down_c)}
            # Dispatch: N LLs in, N (N - 1) forwards out; combine: N in, N out.
            msgs = {"dispatch": p.N * p.N, "combine": 2 * p.N}
            parts = [op] if op != "dc" else ["dispatch", "combine"]
            self.switch = sum(p.switch_msg_cost_s * msgs[x] + p.switch_byte_cost_s *
                              (sum(sw_share[x][0]) + sum(sw_share[x][1])) for x in parts)
            # Store and forward: what leaves a rank's down link waits for what it needs up.
            self.links = {"dispatch": Ud + Dd, "combine": Uc + Dc,
                          "dc": Ud + max(Uc, Dd) + Dc}[op] / rate
            self.total = self.hops + max(self.links, self.switch)
        else:
            sends = tr.sends * (2 if op == "dc" else 1)
            self.hops = p.latency_s + max(sends - 1, 0) * p.msg_cost_s
            self.switch = 0.0
            self.links = self.busiest / rate
            self.total = self.hops + self.links

    @property
    def bandwidth_bound(self):
        return self.links >= self.hops + self.switch


def ll_time(op, algo, p, stats, dispatch_row=None, combine_row=None):
    """The time of a low-latency dispatch, combine or dc (dispatch || combine): LLTiming."""
    if op not in MASKED_OPS:
        raise ModelError(f"--op {op} --form ll: the low-latency form is dispatch, combine "
                         f"or dc")
    if p.tree:
        raise ModelError("the low-latency form does not cross a switch tree yet (base/wire.h): "
                         "drop --leaves and --tree")
    if algo == "ring":
        algo = "a2a"  # the form is point to point on the ring too
    return LLTiming(op, algo, p, ll_traffic(algo, p, stats, dispatch_row, combine_row))
