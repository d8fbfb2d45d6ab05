"""What the Communicator accepts as a buffer: a CPU torch tensor or a numpy
array, contiguous, of a type libincmoe knows.  Every refusal is a ValueError
naming the argument and what was wrong, raised before anything is posted.
"""

from . import _lib

try:
    import torch
except ImportError:  # numpy-only use
    torch = None
try:
    import numpy
except ImportError:
    numpy = None

GPU_HINT = (
    "incmoe.Communicator and the 'incmoe' torch.distributed backend take CPU tensors; "
    "for GPU tensors use NCCL with NCCL_NET_PLUGIN=incmoe NCCL_COLLNET_ENABLE=1"
)


def _torch_dtypes():
    names = {
        "float32": "float32",
        "float16": "float16",
        "bfloat16": "bfloat16",
        "float64": "float64",
        "int8": "int8",
        "uint8": "uint8",
        "int32": "int32",
        "int64": "int64",
        "uint32": "uint32",
        "uint64": "uint64",
    }
    return {getattr(torch, t): n for t, n in names.items() if hasattr(torch, t)}


_TORCH = _torch_dtypes() if torch is not None else {}


class Buffer:
    """A checked view of one argument: where its bytes are and what owns them."""

    __slots__ = ("obj", "ptr", "nbytes", "numel", "dtype", "owner", "owner_ptr", "owner_nbytes")


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def as_buffer(x, what):
    """Check x and describe it; `what` names the argument in errors."""
    b = Buffer()
    b.obj = x
    if is_torch(x):
        dev = x.device
        if dev.type != "cpu" or getattr(x, "is_cuda", False):
            raise ValueError("%s is a tensor on device '%s': %s" % (what, dev, GPU_HINT))
        if x.is_sparse or x.layout != torch.strided:
            raise ValueError("%s has layout %s: only dense (strided) tensors" % (what, x.layout))
        if x.dtype not in _TORCH:
            raise ValueError(
                "%s has dtype %s: expected one of %s"
                % (what, x.dtype, ", ".join(sorted(str(t) for t in _TORCH)))
            )
        if not x.is_contiguous():
            raise ValueError(
                "%s is not contiguous (shape %s, strides %s): pass x.contiguous()"
                % (what, tuple(x.shape), x.stride())
            )
        b.dtype = _TORCH[x.dtype]
        b.numel = x.numel()
        b.nbytes = b.numel * x.element_size()
        b.ptr = x.data_ptr()
        st = x.untyped_storage()
        # Holding the storage keeps its memory allocated, so a cached
        # registration of it cannot come to name memory that was reused.
        b.owner = st
        b.owner_ptr = st.data_ptr()
        b.owner_nbytes = st.nbytes()
        return b
    if numpy is not None and isinstance(x, numpy.ndarray):
        name = x.dtype.name
        if name not in _lib.DTYPES:
            raise ValueError(
                "%s has dtype %s: expected one of %s"
                % (what, name, ", ".join(n for n in _lib.DTYPES if n != "bfloat16"))
            )
        if not x.flags.c_contiguous:
            raise ValueError(
                "%s is not C-contiguous (shape %s, strides %s): pass numpy.ascontiguousarray(x)"
                % (what, x.shape, x.strides)
            )
        if not x.flags.writeable:
            raise ValueError("%s is read-only" % what)
        b.dtype = name
        b.numel = x.size
        b.nbytes = x.nbytes
        b.ptr = x.ctypes.data
        # The array that owns the memory: numpy cannot free or resize it
        # while this reference lives.
        root = x
        while isinstance(root.base, numpy.ndarray):
            root = root.base
        if root.flags.c_contiguous and root.base is None:
            b.owner, b.owner_ptr, b.owner_nbytes = root, root.ctypes.data, root.nbytes
        else:
            b.owner, b.owner_ptr, b.owner_nbytes = x, b.ptr, b.nbytes
        return b
    raise ValueError(
        "%s is a %s: expected a CPU torch.Tensor or a numpy.ndarray" % (what, type(x).__name__)
    )


def blank(nbytes):
    """nbytes zero bytes the Communicator can register: a torch tensor, else a numpy array."""
    if torch is not None:
        return torch.zeros(nbytes, dtype=torch.uint8)
    return numpy.zeros(nbytes, dtype=numpy.uint8)


def owner_alive(owner, ptr, nbytes):
    """Does the owner still hold the memory it held when it was registered?"""
    if torch is not None and isinstance(owner, torch.UntypedStorage):
        return owner.data_ptr() == ptr and owner.nbytes() == nbytes
    return owner.ctypes.data == ptr and owner.nbytes == nbytes
