"""Sizes, rates and routes as the command line gives them, and as the tables print them."""

import re

from .presets import ModelError


def parse_size(text, what):
    """Bytes from 4096, 128K, 8M, 1G (powers of 1024)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)i?[bB]?\s*", str(text))
    if not m:
        raise ModelError(f"{what}: expected bytes such as 4096, 128K, 8M; got '{text}'")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return float(m.group(1)) * scale


def parse_rate(text, what="--rate"):
    """Bits per second from tc-style text (100mbit, 1gbit, 500kbit) or a number."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(bit|kbit|mbit|gbit|tbit)?\s*", str(text).lower())
    if not m:
        raise ModelError(f"{what}: expected a rate such as 100mbit or 100gbit; got '{text}'")
    scale = {None: 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[m.group(2)]
    bps = float(m.group(1)) * scale
    if bps <= 0:
        raise ModelError(f"{what}: the rate must be above 0; got '{text}'")
    return bps


def parse_route(text):
    """('uniform', 0.0) or ('zipf', S)."""
    if text == "uniform":
        return ("uniform", 0.0)
    m = re.fullmatch(r"zipf:([0-9]+(?:\.[0-9]+)?)", text or "")
    if not m:
        raise ModelError(f"--route: expected uniform or zipf:S (e.g. zipf:1.0); got '{text}'")
    return ("zipf", float(m.group(1)))


def route_text(route):
    return "uniform" if route[0] == "uniform" else f"zipf:{route[1]:g}"


def fmt_bytes(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_rate(bps):
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def fmt_time(s):
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
