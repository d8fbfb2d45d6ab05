"""Loading libincmoe and libincmoe_moe, and the ctypes view of their headers.

The libraries are looked for, in order, in:
  1. $INCMOE_LIBDIR: the directory holding libincmoe.so and libincmoe_moe.so
     (or several, separated by ':');
  2. the build tree of the source checkout this package sits in
     ($INCMOE_BUILD_DIR, else <top>/build; libtool keeps them in .libs/);
  3. the libdir pkg-config names for incmoe (the installed libraries);
  4. the dynamic loader's own search (ld.so.conf, LD_LIBRARY_PATH).
The first place holding the library wins; libincmoe_moe is loaded only when
an MoE layer is made, from the directory pair found the same way.

Mirrors include/incmoe/incmoe.h and incmoe_moe.h: every struct here has
the header's field order and types, and every function its prototype.
"""

import ctypes
import enum
import os
import shutil
import subprocess
import threading


class Status(enum.IntEnum):
    """incmoe_status_t: 0 is success, errors are negative (incmoe_strerror names each)."""

    OK = 0
    IN_PROGRESS = 1
    ERR_INVALID_ARG = -1
    ERR_NO_MEMORY = -2
    ERR_UNREACHABLE = -3
    ERR_AUTH = -4
    ERR_PEER_FAILED = -5
    ERR_TIMEOUT = -6
    ERR_PROTOCOL = -7
    ERR_MISMATCH = -8
    ERR_OUT_OF_RANGE = -9
    ERR_UNSUPPORTED = -10
    ERR_JOB = -11
    ERR_TRANSPORT = -12
    ERR_CLOSED = -13
    ERR_BUSY = -14


def status(value):
    """value as a Status, or the bare int for a value this package does not know."""
    try:
        return Status(value)
    except ValueError:
        return value


# The names the package had before Status, kept importable.
OK = Status.OK
IN_PROGRESS = Status.IN_PROGRESS
ERR_INVALID_ARG = Status.ERR_INVALID_ARG
ERR_TIMEOUT = Status.ERR_TIMEOUT
ERR_CLOSED = Status.ERR_CLOSED
ERR_BUSY = Status.ERR_BUSY

# incmoe_dtype_t
DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
# incmoe_redop_t
REDOPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
# incmoe_algo_t
ALGOS = {"inc": 0, "ring": 1, "a2a": 2}
# incmoe_stream_t
STREAM_ALLGATHER, STREAM_REDUCESCATTER, STREAM_ALLREDUCE, STREAM_BARRIER = 0, 1, 2, 3
STREAM_DISPATCH, STREAM_COMBINE = 4, 5

COMM_PARAM_SECRET = 1 << 0
COMM_PARAM_ALGO = 1 << 1
COMM_PARAM_TIMEOUT = 1 << 2
COMM_PARAM_PROGRESS_TIMEOUT = 1 << 4
MAX_RANKS = 256
MAX_SECRET = 64
DISPATCH_PARAM_REFUSED = 1 << 0
DISPATCH_PARAM_LOW_LATENCY = 1 << 1
DISPATCH_PARAM_EXPERT_LAYOUT = 1 << 2
COMBINE_PARAM_REFUSED = 1 << 0
REFUSAL_MAX = 128

# incmoe_moe_mode_t
MOE_MODES = {"baseline": 0, "pipelined": 1, "auto": 2, "decode": 3}
MOE_MAX_WORKERS = 16  # INCMOE_MOE_MAX_WORKERS
MOE_FWD_MODE = 1 << 0
MOE_FWD_X = 1 << 1
MOE_FWD_TOPK_IDS = 1 << 2
MOE_FWD_TOPK_WEIGHTS = 1 << 3
MOE_FWD_COUNTS = 1 << 4
MOE_FWD_ROUTING = 1 << 6
MOE_FWD_REFUSED = 1 << 7
MOE_ROUTINGS = {"full": 0, "masked": 1, "auto": 2}
# incmoe_moe_params_ext_t
MOE_PARAM_PATH = 1 << 0
MOE_PARAM_DECODE = 1 << 1
MOE_PARAM_PLACEMENT = 1 << 2
MOE_PARAM_ALL = MOE_PARAM_PATH | MOE_PARAM_DECODE | MOE_PARAM_PLACEMENT
MOE_DECODE_TOKENS = 32  # the decode capacity's default bound
MOE_ALGO_AUTO = -1
MOE_ALGO_COMM = -2
# incmoe_moe_split_t ("Choosing a placement")
MOE_SPLITS = {"per_token": 0, "static": 1}


class comm_params_t(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint32),
        ("switch_addr", ctypes.c_char_p),
        ("job_id", ctypes.c_uint64),
        ("rank", ctypes.c_int),
        ("nranks", ctypes.c_int),
        ("secret", ctypes.c_void_p),
        ("secret_len", ctypes.c_size_t),
        ("algo", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("progress_timeout_ms", ctypes.c_int),
    ]


class req_t(ctypes.Structure):
    _fields_ = [("stream", ctypes.c_int), ("epoch", ctypes.c_uint64)]


class layout_t(ctypes.Structure):
    _fields_ = [
        ("block_stride", ctypes.c_size_t),
        ("offset", ctypes.c_size_t),
        ("length", ctypes.c_size_t),
        ("valid", ctypes.POINTER(ctypes.c_size_t)),
    ]


class dispatch_params_t(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint32),
        ("send_mr", ctypes.c_void_p),
        ("send_offset", ctypes.c_size_t),
        ("nrows", ctypes.c_size_t),
        ("row_bytes", ctypes.c_size_t),
        ("sets", ctypes.POINTER(ctypes.c_uint64)),
        ("recv_mr", ctypes.c_void_p),
        ("recv_offset", ctypes.c_size_t),
        ("capacity", ctypes.c_size_t),
        ("refused", ctypes.c_char_p),
        ("max_tokens", ctypes.c_size_t),
        ("experts", ctypes.POINTER(ctypes.c_int32)),
        ("topk", ctypes.c_int),
        ("num_experts", ctypes.c_int),
        ("expert_rank", ctypes.POINTER(ctypes.c_int32)),
    ]


class combine_params_t(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint32),
        ("dispatch", req_t),
        ("send_mr", ctypes.c_void_p),
        ("send_offset", ctypes.c_size_t),
        ("recv_mr", ctypes.c_void_p),
        ("recv_offset", ctypes.c_size_t),
        ("row_count", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("op", ctypes.c_int),
        ("refused", ctypes.c_char_p),
    ]


class moe_config_t(ctypes.Structure):
    _fields_ = [
        ("nbands", ctypes.c_int),
        ("gather_workers", ctypes.c_int),
        ("compute_workers", ctypes.c_int),
        ("reduce_workers", ctypes.c_int),
        ("tail_bands", ctypes.c_int),
    ]


class moe_params_t(ctypes.Structure):
    _fields_ = [
        ("num_experts", ctypes.c_int),
        ("top_k", ctypes.c_int),
        ("hidden", ctypes.c_int),
        ("intermediate", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("comm", ctypes.c_void_p),
        ("max_tokens", ctypes.c_int),
        ("expert_owner", ctypes.POINTER(ctypes.c_int)),
        ("w_gate", ctypes.c_void_p),
        ("w_up", ctypes.c_void_p),
        ("w_down", ctypes.c_void_p),
        ("config", moe_config_t),
        ("timeout_ms", ctypes.c_int),
        ("backend", ctypes.c_int),
    ]


class moe_forward_params_t(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint32),
        ("mode", ctypes.c_int),
        ("x", ctypes.c_void_p),
        ("topk_ids", ctypes.c_void_p),
        ("topk_weights", ctypes.c_void_p),
        ("counts", ctypes.POINTER(ctypes.c_int)),
        ("stream", ctypes.c_void_p),
        ("routing", ctypes.c_int),
        ("refused", ctypes.c_char_p),
    ]


class moe_timing_t(ctypes.Structure):
    _fields_ = [
        ("total_ms", ctypes.c_double),
        ("exchange_ms", ctypes.c_double),
        ("allgather_ms", ctypes.c_double),
        ("ffn_ms", ctypes.c_double),
        ("reducescatter_ms", ctypes.c_double),
        ("dispatch_ms", ctypes.c_double),
        ("combine_ms", ctypes.c_double),
        ("routing", ctypes.c_int),
        ("algo", ctypes.c_int),
        ("mode", ctypes.c_int),
        ("measured", ctypes.c_int),
        ("measure_runs", ctypes.c_int),
        ("nbands", ctypes.c_int),
    ]


class moe_path_t(ctypes.Structure):
    _fields_ = [
        ("algo", ctypes.c_int),
        ("mode", ctypes.c_int),
        ("routing", ctypes.c_int),
        ("comm_params", ctypes.POINTER(comm_params_t)),
    ]


class moe_placement_t(ctypes.Structure):
    _fields_ = [
        ("offsets", ctypes.POINTER(ctypes.c_int)),
        ("ranks", ctypes.POINTER(ctypes.c_int)),
    ]


class moe_params_ext_t(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("path", moe_path_t),
        ("decode_tokens", ctypes.c_int),
        ("placement", ctypes.POINTER(moe_placement_t)),
    ]


class moe_routing_sample_t(ctypes.Structure):
    _fields_ = [
        ("num_experts", ctypes.c_int),
        ("top_k", ctypes.c_int),
        ("nranks", ctypes.c_int),
        ("counts", ctypes.POINTER(ctypes.c_int)),
        ("topk_ids", ctypes.POINTER(ctypes.c_int32)),
    ]


_c = ctypes
_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_ST = ctypes.c_int  # incmoe_status_t
_REQP = ctypes.POINTER(req_t)
_LAYP = ctypes.POINTER(layout_t)

_PROTOS = {
    "incmoe_strerror": (_c.c_char_p, [_ST]),
    "incmoe_get_version": (None, [_P, _P, _P]),
    "incmoe_dtype_size": (_SZ, [_c.c_int]),
    "incmoe_reduce_supported": (_c.c_int, [_c.c_int, _c.c_int]),
    "incmoe_comm_create": (_ST, [_c.POINTER(comm_params_t), _c.POINTER(_P)]),
    "incmoe_comm_destroy": (_ST, [_P]),
    "incmoe_comm_release": (_ST, [_P]),
    "incmoe_comm_error": (_ST, [_P, _c.c_char_p, _SZ]),
    "incmoe_comm_shrink": (_ST, [_P, _c.POINTER(_P)]),
    "incmoe_comm_rank": (_c.c_int, [_P]),
    "incmoe_comm_nranks": (_c.c_int, [_P]),
    "incmoe_comm_job_id": (_c.c_uint64, [_P]),
    "incmoe_mem_register": (_ST, [_P, _P, _SZ, _c.POINTER(_P)]),
    "incmoe_mem_deregister": (_ST, [_P, _P]),
    "incmoe_allgather": (_ST, [_P, _P, _SZ, _P, _SZ, _LAYP, _REQP]),
    "incmoe_reducescatter": (_ST, [_P, _P, _SZ, _P, _SZ, _LAYP, _c.c_int, _c.c_int, _REQP]),
    "incmoe_allreduce": (_ST, [_P, _P, _SZ, _P, _SZ, _SZ, _c.c_int, _c.c_int, _REQP]),
    "incmoe_barrier": (_ST, [_P, _REQP]),
    "incmoe_dispatch": (_ST, [_P, _c.POINTER(dispatch_params_t), _REQP]),
    "incmoe_dispatch_result": (_ST, [_P, _REQP, _c.POINTER(_SZ), _c.POINTER(_c.c_uint32), _SZ]),
    "incmoe_dispatch_release": (_ST, [_P, _REQP]),
    "incmoe_combine": (_ST, [_P, _c.POINTER(combine_params_t), _REQP]),
    "incmoe_req_error": (_ST, [_P, _REQP, _c.c_char_p, _SZ]),
    "incmoe_test": (_ST, [_P, _REQP]),
    "incmoe_wait": (_ST, [_P, _REQP]),
}

_MOE_PROTOS = {
    "incmoe_moe_params_init": (None, [_c.POINTER(moe_params_t)]),
    "incmoe_moe_create": (_ST, [_c.POINTER(moe_params_t), _c.POINTER(_P)]),
    "incmoe_moe_create_ex": (
        _ST,
        [_c.POINTER(moe_params_t), _c.POINTER(moe_params_ext_t), _c.POINTER(_P)],
    ),
    "incmoe_moe_destroy": (_ST, [_P]),
    "incmoe_moe_forward_ex": (_ST, [_P, _c.POINTER(moe_forward_params_t), _c.POINTER(_P)]),
    "incmoe_moe_config_for": (_ST, [_P, _c.POINTER(_c.c_int), _c.POINTER(moe_config_t)]),
    "incmoe_moe_config_str": (_c.c_int, [_c.POINTER(moe_config_t), _c.c_char_p, _SZ]),
    "incmoe_moe_last_timing_ex": (_ST, [_P, _c.POINTER(moe_timing_t), _SZ]),
    "incmoe_moe_placement_choose": (
        _ST,
        [_c.POINTER(moe_routing_sample_t), _c.c_int, _c.POINTER(_c.c_int), _c.POINTER(_c.c_int),
         _c.c_char_p, _SZ],
    ),
    "incmoe_moe_placement_rows": (
        _ST,
        [_c.POINTER(moe_routing_sample_t), _c.POINTER(moe_placement_t), _c.c_int,
         _c.POINTER(_c.c_int64), _c.c_char_p, _SZ],
    ),
}


def _source_build_dirs():
    """Where a build of the checkout this package lives in keeps the libraries."""
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.normpath(os.path.join(here, "..", "..", ".."))
    if not os.path.isfile(os.path.join(top, "include", "incmoe", "incmoe.h")):
        return []
    build = os.environ.get("INCMOE_BUILD_DIR") or os.path.join(top, "build")
    return [os.path.join(build, "plugin", ".libs"), os.path.join(build, "moe", ".libs")]


def _pkgconfig_libdir():
    if shutil.which("pkg-config") is None:
        return None
    try:
        out = subprocess.run(
            ["pkg-config", "--variable=libdir", "incmoe"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    d = out.stdout.strip()
    return d if out.returncode == 0 and d else None


def _candidates(name):
    """Paths to try for lib<name>.so, best first; the loader's search last."""
    dirs = []
    env = os.environ.get("INCMOE_LIBDIR")
    if env:
        dirs += [d for d in env.split(os.pathsep) if d]
    dirs += _source_build_dirs()
    pc = _pkgconfig_libdir()
    if pc:
        dirs.append(pc)
    paths = [os.path.join(d, "lib%s.so" % name) for d in dirs]
    return [p for p in paths if os.path.exists(p)] + ["lib%s.so.0" % name]


class LibraryNotFound(OSError):
    pass


def _load(name, protos):
    tried = []
    for path in _candidates(name):
        try:
            # RTLD_GLOBAL: libincmoe_moe's dependency on libincmoe.so.0 is then
            # met by the copy already loaded, wherever it came from.
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for fn, (res, args) in protos.items():
            f = getattr(lib, fn)
            f.restype = res
            f.argtypes = args
        lib.incmoe_path = path
        return lib
    raise LibraryNotFound(
        "lib%s.so not found; tried: %s. Build the C tree (tools/quickstart build), "
        "install it, or set INCMOE_LIBDIR to the directory holding it" % (name, "; ".join(tried))
    )


_lock = threading.Lock()
_libs = {}


def lib():
    """libincmoe (loaded on first use)."""
    with _lock:
        if "core" not in _libs:
            _libs["core"] = _load("incmoe", _PROTOS)
        return _libs["core"]


def moe_lib():
    """libincmoe_moe (loaded on first use; needs libincmoe first)."""
    lib()
    with _lock:
        if "moe" not in _libs:
            _libs["moe"] = _load("incmoe_moe", _MOE_PROTOS)
        return _libs["moe"]


def strerror(status):
    s = lib().incmoe_strerror(status)
    return s.decode() if s else "status %d" % status


def version():
    a, b, c = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    lib().incmoe_get_version(ctypes.byref(a), ctypes.byref(b), ctypes.byref(c))
    return (a.value, b.value, c.value)
