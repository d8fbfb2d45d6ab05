"""The exception every failed C call becomes."""

import ctypes

from . import _lib


class IncmoeError(RuntimeError):
    """A call into libincmoe (or libincmoe_moe) failed.

    status: the incmoe_status_t, an incmoe.Status (negative; an int for a
    status newer than this package); name: incmoe_strerror's text; reason:
    the communicator's first error (incmoe_comm_error), "" if none.
    """

    def __init__(self, call, status, reason=""):
        self.call = call
        self.status = _lib.status(status)
        self.name = _lib.strerror(status)
        self.reason = reason
        msg = "%s: %s" % (call, self.name)
        if reason:
            msg += " (%s)" % reason
        super().__init__(msg)


def comm_reason(comm_ptr):
    """The communicator's first error text, or ""."""
    if not comm_ptr:
        return ""
    buf = ctypes.create_string_buffer(512)
    st = _lib.lib().incmoe_comm_error(comm_ptr, buf, len(buf))
    if st == _lib.OK:
        return ""
    return buf.value.decode(errors="replace")


def check(call, status, comm_ptr=None):
    """Raise IncmoeError for a negative status, with the communicator's reason."""
    if status < 0:
        raise IncmoeError(call, status, comm_reason(comm_ptr))
    return status
