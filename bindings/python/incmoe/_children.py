"""What a communicator owns besides its registrations: the C objects built on
it (an incmoe.MoE layer's incmoe_moe_t), each destroyed before the
communicator itself.

A layer's destroy deregisters the layer's regions through the communicator,
so it must run while the communicator lives.  The Python objects cannot
promise that order: a layer caught in a reference cycle (a transformers
model holds many) is finalised by a gc pass, after `with Communicator(...)`
has closed, and a layer's destroy then reached a freed communicator.  So
the communicator holds each child's handle (never the Python object, which
would keep the layer alive) and destroys what is left of them when it
closes; the layer sees its handle emptied and does nothing more.  Both
orders are safe: the layer first (its close destroys and forgets the
handle) or the communicator first.
"""

import threading


class Handle:
    """A C object owned by a communicator; ptr is None once destroyed."""

    __slots__ = ("ptr", "_destroy")

    def __init__(self, ptr, destroy):
        self.ptr, self._destroy = ptr, destroy


class Children:
    def __init__(self):
        self._lock = threading.Lock()
        self._handles = []

    def adopt(self, ptr, destroy):
        """Own ptr, destroyed by destroy(ptr) -> status; returns its Handle."""
        h = Handle(ptr, destroy)
        with self._lock:
            self._handles.append(h)
        return h

    def release(self, h):
        """Destroy h now if it still lives; its status, else 0."""
        with self._lock:  # held while destroying: close_all waits for it
            if h.ptr is None:
                return 0
            ptr, h.ptr = h.ptr, None
            self._handles.remove(h)
            return h._destroy(ptr)

    def close_all(self):
        """The communicator is closing: destroy every child still alive."""
        with self._lock:
            handles, self._handles = self._handles, []
            for h in handles:
                ptr, h.ptr = h.ptr, None
                h._destroy(ptr)
