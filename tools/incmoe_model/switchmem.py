"""What the masked collectives need of a switch: job memory and line-rate credits."""

import math


def job_memory(p, credits):
    """README's bound for one job, and what the masked collectives add under
    the design assumption: two more data streams (dispatch, combine) of
    `credits` chunks per rank, the bitmaps inside the chunks, and the
    combine's results held as a ReduceScatter's (2 x credits chunks)."""
    c, n = p.chunk, p.N
    today = credits * ((c + 8 * n) * n * 3 + c * 6)
    masked = credits * ((c + 8 * n) * n * 2 + c * 2)
    return today, masked


def line_rate_credits(p):
    """Credits a stream needs to keep its link busy: a chunk's round trip is
    two hops, the chunk up and its credit's return behind a chunk down.
    Queues on the path add to it (the testbed's 20 ms tbf queues are why it
    runs 64 credits of 128 KiB); this counts none."""
    eff = p.efficiency * p.rate_bps / 8
    rtt = 2 * p.latency_s + 2 * p.chunk / eff
    return max(1, math.ceil(rtt * eff / p.chunk) + 1)
