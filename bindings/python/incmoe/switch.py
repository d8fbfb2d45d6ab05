"""Starting an incmoe-switchd on this machine (examples, tests, benchmarks).

The program is found as the C tools find it: $INCMOE_SWITCHD, else the build
tree of the checkout this package sits in, else incmoe-switchd on PATH (the
installed $bindir).
"""

import os
import select
import shutil
import signal
import subprocess
import time

from . import _lib


def find_switchd():
    env = os.environ.get("INCMOE_SWITCHD")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError("INCMOE_SWITCHD=%s is not an executable file" % env)
        return env
    tried = []
    libdirs = _lib._source_build_dirs()
    if libdirs:  # <build>/plugin/.libs -> <build>/switch/incmoe-switchd
        build = os.path.dirname(os.path.dirname(libdirs[0]))
        p = os.path.join(build, "switch", "incmoe-switchd")
        if os.access(p, os.X_OK):
            return p
        tried.append(p)
    p = shutil.which("incmoe-switchd")
    if p:
        return p
    tried.append("incmoe-switchd on PATH")
    raise FileNotFoundError(
        "incmoe-switchd not found (tried %s); set INCMOE_SWITCHD=PATH" % ", ".join(tried)
    )


class Switch:
    """An incmoe-switchd listening on 127.0.0.1 (a free port), stopped by stop()
    or on leaving a with-block.  `address` is its "host:port"."""

    def __init__(self, args=(), timeout_s=30.0, log_level=None):
        cmd = [find_switchd(), "--listen", "127.0.0.1:0"] + list(args)
        if log_level:
            cmd += ["--log-level", log_level]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self.address = self._read_address(timeout_s)

    def _read_address(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(
                    "incmoe-switchd did not report its address (exit status %s, output %r)"
                    % (self.proc.returncode, line)
                )
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                c = os.read(self.proc.stdout.fileno(), 1)
                if not c:
                    continue
                line += c
        words = line.decode().split()
        if len(words) < 4 or words[1] != "listening":
            self.stop()
            raise RuntimeError("incmoe-switchd's first line is %r" % line)
        return words[-1]

    def alive(self):
        return self.proc.poll() is None

    def stop(self, grace_s=5.0):
        """SIGTERM, then SIGKILL after grace_s; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
