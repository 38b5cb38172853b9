"""Audit JAX kernels as candidates through the tilekern package: a jitted
JAX axpy, the same axpy as a Pallas kernel (TPU interpret mode, run on the
CPU), and a deliberately wrong one that rounds its intermediate to the
storage dtype early, which the audit catches and names; XLA's fused
multiply-add, named under numpy's contract and passing under XLA's; and a
jitted jnp.dot with float32 accumulation, which differs from the oracle in
bits and passes within the error bound.

    JAX_PLATFORMS=cpu python examples/python/audit_jax.py

Needs jax (for instance `pip install "jax[cpu]==0.9.2" absl-py`); without it
the script says so and exits 0 having audited nothing."""
import os
import sys

import numpy as np
import tilekern as tk

SHAPES = [(8, 128), (17, 257)]
BLOCK = (8, 128)


def main():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl
    except ImportError as e:
        print(f"audit_jax: jax is not installed ({e}); nothing audited")
        return 0

    @jax.jit
    def jax_axpy(x, y):
        return (2.0 * x.astype(jnp.float32) + y.astype(jnp.float32)).astype(x.dtype)

    def body(x_ref, y_ref, o_ref):
        o_ref[...] = (2.0 * x_ref[...].astype(jnp.float32)
                      + y_ref[...].astype(jnp.float32)).astype(o_ref.dtype)

    def pallas_axpy(x, y):
        # Pad to whole blocks, one grid step per block, crop back.
        (m, n), (bm, bn) = x.shape, BLOCK
        pads = ((0, -m % bm), (0, -n % bn))
        px, py = jnp.pad(x, pads), jnp.pad(y, pads)
        spec = pl.BlockSpec(BLOCK, lambda i, j: (i, j))
        out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(px.shape, x.dtype),
                             grid=(px.shape[0] // bm, px.shape[1] // bn),
                             in_specs=(spec, spec), out_specs=spec, interpret=True)(px, py)
        return out[:m, :n]

    @jax.jit
    def early_rounding(x, y):
        # Wrong on purpose: 3x rounded to the storage dtype before the add.
        t = (3.0 * x.astype(jnp.float32)).astype(x.dtype)
        return (t.astype(jnp.float32) + y.astype(jnp.float32)).astype(x.dtype)

    print(f"jax {jax.__version__} on {jax.default_backend()}; "
          f"libtilekern {tk.version()}")
    ok = True

    @jax.jit
    def dot(x, y):
        return jnp.dot(x, y, preferred_element_type=jnp.float32)

    result = tk.audit_matmul(dot, shapes=[(17, 257, 129), (64, 512, 96)],
                             dtypes=("bfloat16", "float16"), out_dtype="float32")
    differ = sum(c.impl_mismatches for c in result.cases)
    print(f"jnp.dot(preferred_element_type=float32), matmul contract: "
          f"{'passed' if result.passed else 'FAILED'}, {differ} elements bit-different "
          f"from the float64 oracle")
    print("  " + result.summary().replace("\n", "\n  "))
    ok &= result.passed and differ > 0

    @jax.jit
    def jax_axpy3(x, y):
        return 3.0 * x + y

    for arith, must_pass in (("numpy", False), ("xla", True)):
        result = tk.audit(jax_axpy3, tk.Kernel.axpy(3.0, arith=arith), shapes=SHAPES,
                          dtypes=("float32",))
        print(f"jitted 3*x + y, contract arith {arith}: "
              f"{'passed' if result.passed else 'FAILED'}")
        print("  " + result.summary().replace("\n", "\n  "))
        ok &= result.passed == must_pass
        ok &= must_pass or {c.diagnosis for c in result.cases} == {"fused-multiply-add"}
    # alpha 2 keeps XLA's fused multiply-add exact (2x is), so a correct
    # kernel equals the separately rounded oracle bit for bit.  The wrong one
    # needs alpha 3 to show early rounding; it is audited in bfloat16 only,
    # since in float32 XLA fuses 3x + y into one FMA, a different departure
    # from the contract.
    for name, candidate, alpha, dtypes, must_pass in (
            ("jitted JAX axpy", jax_axpy, 2.0, ("float32", "bfloat16"), True),
            ("Pallas axpy (interpret mode)", pallas_axpy, 2.0, ("float32", "bfloat16"),
             True),
            ("early-rounding axpy (wrong on purpose)", early_rounding, 3.0, ("bfloat16",),
             False)):
        result = tk.audit(candidate, tk.Kernel.axpy(alpha), shapes=SHAPES, dtypes=dtypes)
        print(f"{name}, contract {alpha}*x + y: "
              f"{'passed' if result.passed else 'FAILED'}")
        print("  " + result.summary().replace("\n", "\n  "))
        ok &= result.passed == must_pass
    if not ok:
        print("audit_jax: a verdict was not the expected one")
        return 1
    print("audit_jax: the correct kernels pass; the wrong ones are caught and diagnosed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
