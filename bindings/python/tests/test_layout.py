"""The ctypes mirror in incmoe._lib against the C headers it mirrors.

A mirrored struct whose layout drifted from the header is silent memory
corruption, so the C compiler is asked: the structs and constants of
include/incmoe/incmoe.h and incmoe_moe.h are read from the headers (names
only), a small C program built here with the system's cc against the same
headers (and the build's incmoe_version.h) prints each struct's size and each
field's offset and size, and each constant's value, and those must equal what
ctypes and _lib say.  Why a program and not offsets exported by the library:
a library exports its public API only (test_exports), and a program built
from the headers checks exactly what a C caller compiles against.

A struct in the headers that _lib does not mirror, a field added to a struct
and not mirrored, or an enumerator of a mirrored enum missing in _lib fails
the test.
"""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

from incmoe import _lib

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
HEADERS = ["incmoe.h", "incmoe_moe.h"]

# The dicts of _lib that mirror a C enum: (enum type, prefix of its enumerators).
ENUM_DICTS = {
    "DTYPES": ("incmoe_dtype_t", "INCMOE_"),
    "REDOPS": ("incmoe_redop_t", "INCMOE_"),
    "ALGOS": ("incmoe_algo_t", "INCMOE_ALGO_"),
    "MOE_MODES": ("incmoe_moe_mode_t", "INCMOE_MOE_"),
    "MOE_SPLITS": ("incmoe_moe_split_t", "INCMOE_MOE_SPLIT_"),
}


def _header_text(name):
    with open(os.path.join(TOP, "include", "incmoe", name)) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _c_structs(text):
    """{typedef name: [field names in order]} of every `typedef struct {...} name;`."""
    out = {}
    for body, name in re.findall(r"typedef\s+struct\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            assert "(" not in decl and "{" not in decl, "%s: cannot read field '%s'" % (name, decl)
            type_and_first, *more = decl.split(",")
            for d in [type_and_first] + more:
                d = re.sub(r"\[[^\]]*\]", "", d).strip()
                fields.append(re.findall(r"\w+", d)[-1])
        out[name] = fields
    return out


def _c_enums(text):
    """{enum type name or None: [enumerator names]} and every #define with a value."""
    enums = {}
    for body, name in re.findall(r"(?:typedef\s+)?enum\s*\w*\s*\{(.*?)\}\s*(\w*)\s*;", text, re.S):
        names = [e.split("=")[0].strip() for e in body.split(",") if e.strip()]
        enums.setdefault(name or None, []).extend(names)
    defines = re.findall(r"^\s*#\s*define\s+(INCMOE_\w+)[ \t]+\S", text, re.M)
    return enums, defines


def _mirrored_structs():
    return {
        "incmoe_" + name: cls
        for name, cls in vars(_lib).items()
        if isinstance(cls, type) and issubclass(cls, ctypes.Structure)
    }


def _include_flags():
    build = os.environ.get("INCMOE_BUILD_DIR") or os.path.join(TOP, "build")
    version_h = os.path.join(build, "include", "incmoe", "incmoe_version.h")
    if not os.path.isfile(version_h):
        pytest.fail("%s is missing: build the C tree first (tools/quickstart build)" % version_h)
    return ["-I" + os.path.join(TOP, "include"), "-I" + os.path.join(build, "include", "incmoe")]


def _compile_and_run(tmp_path, structs, constants):
    cc = os.environ.get("CC") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler (cc) to build the layout probe with")
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "incmoe/incmoe.h"',
        '#include "incmoe/incmoe_moe.h"',
        "int main(void)",
        "{",
    ]
    for t, fields in structs.items():
        lines.append('    printf("struct %s %%zu %%zu\\n", sizeof(%s), _Alignof(%s));' % (t, t, t))
        for f in fields:
            lines.append(
                '    printf("field %s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                % (t, f, t, f, t, f)
            )
    for c in constants:
        lines.append('    printf("const %s %%lld\\n", (long long)(%s));' % (c, c))
    lines += ["    return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    cmd = [cc, "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(src)] + _include_flags()
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, "%s\n%s" % (" ".join(cmd), built.stderr)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    sizes, fields, values = {}, {}, {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "struct":
            sizes[rest[0]] = (int(rest[1]), int(rest[2]))
        elif kind == "field":
            fields[(rest[0], rest[1])] = (int(rest[2]), int(rest[3]))
        else:
            values[rest[0]] = int(rest[1])
    return sizes, fields, values


@pytest.fixture(scope="module")
def c_side(tmp_path_factory):
    text = "\n".join(_header_text(h) for h in HEADERS)
    structs = _c_structs(text)
    enums, defines = _c_enums(text)
    constants = sorted({e for names in enums.values() for e in names} | set(defines))
    sizes, fields, values = _compile_and_run(tmp_path_factory.mktemp("layout"), structs, constants)
    return structs, enums, sizes, fields, values


def test_every_header_struct_is_mirrored(c_side):
    structs = c_side[0]
    mirrored = _mirrored_structs()
    assert sorted(structs) == sorted(mirrored), "the headers' structs, and _lib's (+ 'incmoe_')"


def test_mirrored_structs_match_size_and_every_offset(c_side):
    structs, _, sizes, fields, _ = c_side
    for t, cls in sorted(_mirrored_structs().items()):
        c_fields = structs.get(t)
        assert c_fields is not None, "%s mirrors %s, which the headers do not define" % (cls, t)
        py_fields = [f[0] for f in cls._fields_]
        assert py_fields == c_fields, "%s: fields in C %s, in _lib %s" % (t, c_fields, py_fields)
        size, align = sizes[t]
        got = ctypes.sizeof(cls)
        assert got == size, "%s: sizeof %d in C, %d in _lib" % (t, size, got)
        end = 0
        for f in c_fields:
            want = fields[(t, f)]
            got = (getattr(cls, f).offset, getattr(cls, f).size)
            assert got == want, "%s.%s: (offset, size) %s in C, %s in _lib" % (t, f, want, got)
            # No field the header reading missed: every gap is padding, smaller than the
            # struct's alignment.
            gap = want[0] - end
            assert gap < align, "%s: %d bytes before %s hold no field read" % (t, gap, f)
            end = want[0] + want[1]
        assert size - end < align, "%s: %d bytes after the last field read" % (t, size - end)


def test_mirrored_constants_match(c_side):
    """Every integer constant of _lib is INCMOE_<its name> in C, with the same value."""
    _, _, _, _, values = c_side
    for name, v in sorted(vars(_lib).items()):
        if not name.isupper() or not isinstance(v, int):
            continue
        c_name = "INCMOE_" + name
        assert c_name in values, "_lib.%s mirrors no constant of the headers" % name
        assert v == values[c_name], "%s: %d in C, _lib.%s is %d" % (c_name, values[c_name], name, v)


@pytest.mark.parametrize("dict_name", sorted(ENUM_DICTS))
def test_mirrored_enums_are_whole(c_side, dict_name):
    _, enums, _, _, values = c_side
    enum, prefix = ENUM_DICTS[dict_name]
    want = {e[len(prefix) :].lower(): values[e] for e in enums[enum]}
    assert getattr(_lib, dict_name) == want, "_lib.%s against C's %s" % (dict_name, enum)


def test_status_is_whole(c_side):
    """incmoe.Status has every incmoe_status_t, by name and value."""
    _, enums, _, _, values = c_side
    want = {e[len("INCMOE_") :]: values[e] for e in enums["incmoe_status_t"]}
    assert {m.name: m.value for m in _lib.Status} == want
