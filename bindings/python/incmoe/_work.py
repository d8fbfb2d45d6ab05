"""What communicator.py and dispatch.py share, below both: the posted
collective (Work) and the check of a reduction's op.  communicator.py calls
down into dispatch.py (Communicator.dispatch, .combine), so dispatch.py may not
import communicator.py back."""

import ctypes
import time

from . import _errors, _lib


class Work:
    """A posted collective.  wait() blocks until it is done (or raises the
    communicator's error); is_completed() asks without blocking.  The Work
    keeps its buffers alive until it completed."""

    def __init__(self, comm, req=None, keep=()):
        self._comm = comm
        self._req = req  # None: nothing was posted (an empty collective)
        self._keep = keep
        self._done = req is None

    def _finish(self):
        self._done = True
        self._keep = ()

    def is_completed(self):
        if self._done:
            return True
        st = _lib.lib().incmoe_test(self._comm._handle(), ctypes.byref(self._req))
        if st == _lib.IN_PROGRESS:
            return False
        _errors.check("incmoe_test", st, self._comm._ptr)
        self._finish()
        return True

    def wait(self, timeout=None):
        """Block until done; timeout (seconds) bounds the wait with TimeoutError."""
        if self._done:
            return True
        if timeout is None:
            st = _lib.lib().incmoe_wait(self._comm._handle(), ctypes.byref(self._req))
            _errors.check("incmoe_wait", st, self._comm._ptr)
            self._finish()
            return True
        deadline = time.monotonic() + timeout
        pause = 1e-4
        while not self.is_completed():
            if time.monotonic() >= deadline:
                raise TimeoutError("collective not completed within %.3f s" % timeout)
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        return True


def check_op(op, dtype, what):
    """op names a reduction the switch does for dtype, else a ValueError naming what."""
    if op not in _lib.REDOPS:
        raise ValueError("%s: op %r: expected one of %s" % (what, op, ", ".join(_lib.REDOPS)))
    if not _lib.lib().incmoe_reduce_supported(_lib.DTYPES[dtype], _lib.REDOPS[op]):
        raise ValueError("%s: the switch does not reduce %s with %s" % (what, dtype, op))
