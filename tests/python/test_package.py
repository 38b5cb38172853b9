"""The package: it loads the library it was built with, mirrors the header
(constants, every function with its arity, every exported symbol), and
raises one exception class per status with the library's message."""
import ctypes
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import tilekern as tk
from tilekern import _ffi

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADER = (ROOT / "include" / "tilekern.h").read_text(encoding="utf-8")


def test_version_matches_the_header():
    major, minor, patch = (int(re.search(rf"#define TK_VERSION_{p} (\d+)", HEADER).group(1))
                           for p in ("MAJOR", "MINOR", "PATCH"))
    assert tk.version() == f"{major}.{minor}.{patch}" == tk.__version__
    assert tk.LIBRARY_VERSION == (major, minor, patch)
    assert _ffi.lib.tk_version_number() == major * 10000 + minor * 100 + patch


def test_imports_from_another_directory_without_environment(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TK_LIBRARY", "PYTHONPATH")}
    run = subprocess.run([sys.executable, "-c",
                          "import tilekern, os; print(tilekern.LIBRARY_PATH)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert os.path.exists(run.stdout.strip())


def run_import(code, env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TK_LIBRARY"}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True)


def test_tk_library_overrides_and_a_missing_one_is_named(tmp_path):
    lib = str(ROOT / "lib" / "libtilekern.so.0")
    run = run_import("import tilekern; print(tilekern.LIBRARY_PATH)", {"TK_LIBRARY": lib},
                     tmp_path)
    assert run.stdout.strip() == lib
    run = run_import("import tilekern", {"TK_LIBRARY": str(tmp_path / "nope.so")}, tmp_path)
    assert run.returncode != 0
    assert "cannot load " + str(tmp_path / "nope.so") + " ($TK_LIBRARY)" in run.stderr


def test_a_too_old_library_is_refused(tmp_path):
    # A stand-in library that says it is 0.1.9.
    src = tmp_path / "old.c"
    src.write_text("unsigned tk_version_number(void) { return 109; }\n")
    so = tmp_path / "libold.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    run = run_import("import tilekern", {"TK_LIBRARY": str(so)}, tmp_path)
    assert run.returncode != 0
    assert "is libtilekern 0.1.9; this package needs 0.6.0" in run.stderr


def test_every_integer_constant_mirrors_the_header():
    defines = re.findall(r"^#define\s+(TK_\w+)\s+(-?\d+)\b", HEADER, re.M)
    assert len(defines) > 50
    statuses = re.findall(r"^\s+X\((TK_\w+), (-?\d+), \"", HEADER, re.M)
    assert len(statuses) == 16
    for name, value in statuses:  # the list is the library's too
        assert _ffi.lib.tk_status_name(int(value)).decode() == name
    defines += statuses
    skip = {"TK_VERSION_MAJOR", "TK_VERSION_MINOR", "TK_VERSION_PATCH"}
    for name, value in defines:
        if name not in skip:
            assert getattr(_ffi, name) == int(value), name
    module = {n for n in dir(_ffi) if re.fullmatch(r"TK_[A-Z0-9_]+", n)}
    assert module - {n for n, _ in defines} == set()


def test_every_function_with_its_arity():
    protos = re.findall(r"^TK_API\s+[^;(]*?\b(tk_\w+)\s*\(([^)]*)\)\s*;", HEADER, re.M | re.S)
    assert len(protos) > 50
    table = {name: argtypes for name, argtypes, _ in _ffi.FUNCTIONS}
    assert len(table) == len(_ffi.FUNCTIONS), "duplicate table entries"
    assert set(table) == {name for name, _ in protos}
    for name, args in protos:
        args = args.strip()
        assert len(table[name]) == (0 if args == "void" else args.count(",") + 1), name


def test_every_exported_symbol_has_an_entry():
    nm = subprocess.run(["nm", "-D", "--defined-only", tk.LIBRARY_PATH],
                        capture_output=True, text=True, check=True).stdout
    exported = {line.split()[2].split("@")[0] for line in nm.splitlines()
                if len(line.split()) == 3 and line.split()[1] in "TW"}
    assert "tk_version_string" in exported
    assert exported == {name for name, _, _ in _ffi.FUNCTIONS}


STATUS_CLASSES = [
    (-1, tk.InvalidArgumentError), (-2, tk.OutOfMemoryError), (-3, tk.SizeOverflowError),
    (-4, tk.ShapeError), (-5, tk.DtypeError), (-6, tk.LayoutError), (-7, tk.RangeError),
    (-8, tk.CapacityError), (-9, tk.RaceError), (-10, tk.NotTargetError),
    (-11, tk.MismatchError), (-12, tk.FileError), (-13, tk.FormatError),
    (-14, tk.StateError), (-15, tk.CallbackError)]


@pytest.mark.parametrize("status,cls", STATUS_CLASSES)
def test_one_class_per_status(status, cls):
    assert issubclass(cls, tk.TilekernError)
    assert cls.status == status
    assert cls.name == _ffi.lib.tk_status_name(status).decode()
    e = cls("why")
    assert e.message == "why"
    assert e.description == _ffi.lib.tk_strerror(status).decode()
    assert str(e) == f"{cls.name}: {e.description}: why"


def test_a_library_error_carries_status_name_and_message():
    with pytest.raises(tk.ShapeError) as info:
        tk.Matrix.create("float32", -3, 4)
    e = info.value
    assert (e.status, e.name) == (-4, "TK_ESHAPE")
    assert "-3" in e.message
    assert e.description == _ffi.lib.tk_strerror(-4).decode()
    assert isinstance(e, ValueError)


def test_str_bytes_and_pathlike_paths(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with tk.Matrix.wrap(a) as m:
        for path in (str(tmp_path / "s.npy"), os.fsencode(tmp_path / "b.npy"),
                     tmp_path / "p.npy"):
            m.save_npy(path)
            with tk.Matrix.load_npy(path) as back:
                assert back.to_numpy().tobytes() == a.tobytes()


def test_a_missing_file_names_path_and_cause(tmp_path):
    path = tmp_path / "no-such-dir" / "x.npy"
    with pytest.raises(tk.FileError) as info:
        tk.Matrix.load_npy(path)
    assert str(path) in info.value.message
    assert os.strerror(2) in info.value.message


def test_bf16_scalars_and_arrays():
    assert tk.bf16_from_f32(1.0) == 0x3F80
    assert tk.bf16_from_f32(1.00390625) == 0x3F80  # the tie rounds to even
    assert tk.bf16_from_f32(float("-nan")) == 0xFFC0
    assert tk.bf16_to_f32(0x3F81) == 1.0078125
    bits = tk.bf16_from_f32(np.float32([[1.0, -2.5], [3.0e38, 1e-40]]))
    assert bits.dtype == np.uint16 and bits.shape == (2, 2)
    assert tk.bf16_to_f32(bits).view(np.uint32).tolist() == (
        bits.astype(np.uint32) << 16).tolist()
    assert tk.ulp_distance("bfloat16", 1.0, 1.0078125) == 1
    assert tk.ulp_distance("float32", 1.0, float("nan")) == 2**64 - 1


def test_rounding_counterexample_and_amdahl():
    assert tk.rounding_counterexample() == (1.0, 1.0078125)
    assert tk.amdahl(0.3, 2.0) == 1 / ((1 - 0.3) + 0.3 / 2.0)
    assert tk.amdahl(0.3, float("inf")) == 1 / (1 - 0.3)


def test_no_binding_lives_outside_the_package():
    assert not (ROOT / "examples" / "python" / "tilekern.py").exists()
    for script in (ROOT / "examples" / "python").glob("*.py"):
        assert "ctypes" not in script.read_text(), script


def test_audit_jax_says_plainly_when_jax_is_missing(tmp_path):
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("raise ImportError('no jax here')\n")
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "audit_jax.py")],
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    assert run.stdout == "audit_jax: jax is not installed (no jax here); nothing audited\n"
