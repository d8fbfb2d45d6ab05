"""A communicator's cache of memory registrations.

Registering memory (incmoe_mem_register, a UCX mem_map) costs far more than a
small collective, so each allocation is registered once, whole, and reused.
An entry keeps a reference to the object that owns the memory (a torch
storage or the numpy array owning the data): while the entry lives that
memory cannot be freed, so no other allocation can come to sit at its address
and be served this registration.  An owner whose memory moved (a storage
resized in place) no longer matches its entry's address and size, and the
entry is dropped.  The cache is bounded (least recently used entries are
deregistered first) and emptied by Communicator.close() or clear_cache().
"""

import collections
import ctypes
import threading

from . import _buffers, _errors, _lib


class _Entry:
    __slots__ = ("mr", "owner", "ptr", "nbytes")


class Registry:
    def __init__(self, comm_ptr, capacity):
        self._comm = comm_ptr
        self._capacity = capacity
        self._lock = threading.Lock()
        self._entries = collections.OrderedDict()  # (ptr, nbytes) -> _Entry
        self._busy = []  # dropped while a collective still used them

    def __len__(self):
        return len(self._entries)

    def region(self, buf):
        """(mr, offset of buf inside it), registering buf's owner if needed."""
        key = (buf.owner_ptr, buf.owner_nbytes)
        with self._lock:
            e = self._entries.get(key)
            if e is not None and not _buffers.owner_alive(e.owner, e.ptr, e.nbytes):
                self._drop(self._entries.pop(key))
                e = None
            if e is None:
                e = self._register(buf)
                self._entries[key] = e
                self._evict()
            else:
                self._entries.move_to_end(key)
            return e.mr, buf.ptr - e.ptr

    def _register(self, buf):
        mr = ctypes.c_void_p()
        st = _lib.lib().incmoe_mem_register(
            self._comm, ctypes.c_void_p(buf.owner_ptr), buf.owner_nbytes, ctypes.byref(mr)
        )
        _errors.check("incmoe_mem_register", st, self._comm)
        e = _Entry()
        e.mr, e.owner, e.ptr, e.nbytes = mr, buf.owner, buf.owner_ptr, buf.owner_nbytes
        return e

    def _drop(self, e):
        st = _lib.lib().incmoe_mem_deregister(self._comm, e.mr)
        if st == _lib.ERR_BUSY:  # a collective in flight uses it: retry later
            self._busy.append(e)

    def _evict(self):
        self._busy = [e for e in self._busy if self._retry(e)]
        while len(self._entries) > self._capacity:
            _, e = self._entries.popitem(last=False)
            self._drop(e)

    def _retry(self, e):
        return _lib.lib().incmoe_mem_deregister(self._comm, e.mr) == _lib.ERR_BUSY

    def clear(self):
        """Deregister every idle entry; entries still in use stay."""
        with self._lock:
            for key in list(self._entries):
                self._drop(self._entries.pop(key))
            self._busy = [e for e in self._busy if self._retry(e)]

    def forget(self):
        """The communicator is gone (its destroy released every region)."""
        with self._lock:
            self._entries.clear()
            self._busy = []
