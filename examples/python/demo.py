"""A first look at libtilekern from Python: the version, and a few floats
represented in bfloat16 (run from the repository root after `make`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tilekern as tk  # noqa: E402


def main():
    print(f"libtilekern {tk.tk_version_string().decode()} ({tk.LIBRARY_PATH})")
    for x in (1.0, 1.00390625, 1.01171875, 3.14159265, -0.0, 1e-40, 3.4e38,
              float("inf"), float("nan")):
        bits = tk.tk_bf16_from_f32(x)
        print(f"  f32 {x!r:>14} -> bf16 0x{bits:04x} = {tk.tk_bf16_to_f32(bits)!r}")
    try:
        tk.Matrix.create(tk.TK_DTYPE_F32, 0, 4)
    except tk.TilekernError as e:
        print(f"  a 0x4 matrix is refused: {e}")


if __name__ == "__main__":
    main()
