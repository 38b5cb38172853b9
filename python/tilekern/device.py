"""Device: where work runs: the host CPU (real), a simulated accelerator
profile (modeled, never measured), or an external real accelerator."""
from typing import List

from . import _ffi
from ._ffi import lib

__all__ = ["Device"]


def _p(code, doc):
    return _ffi.param("device", code, doc)


class Device(_ffi.Handle):
    """Create with ``Device.host()``, ``Device.simulated("TPU v5 lite")`` or
    ``Device.external("tpu", "TPU v5 lite")``."""

    _destroy = "tk_device_destroy"

    @classmethod
    def host(cls) -> "Device":
        """The host CPU: real, platform "cpu"."""
        return cls(_ffi.new_handle(lib.tk_device_host))

    @classmethod
    def simulated(cls, profile: str = "TPU v5 lite") -> "Device":
        """A simulated accelerator profile (see Device.profiles())."""
        return cls(_ffi.new_handle(lib.tk_device_simulated,
                                   _ffi.as_str(profile, "profile").encode()))

    @classmethod
    def external(cls, platform: str, kind: str) -> "Device":
        """A real accelerator driven by the caller (for instance through JAX)."""
        return cls(_ffi.new_handle(lib.tk_device_external,
                                   _ffi.as_str(platform, "platform").encode(),
                                   _ffi.as_str(kind, "kind").encode()))

    @staticmethod
    def profiles() -> List[str]:
        """Names of the simulated profiles."""
        names, i = [], 0
        while (name := lib.tk_device_profile_name(i)) is not None:
            names.append(name.decode())
            i += 1
        return names

    @property
    def is_simulated(self) -> bool:
        return lib.tk_device_is_simulated(self) == 1

    @property
    def kind(self) -> str:
        """The device kind, "TPU v5 lite" for instance."""
        return _ffi.text(lib.tk_device_kind(self))

    @property
    def platform(self) -> str:
        """"cpu", "tpu", ..."""
        return _ffi.text(lib.tk_device_platform(self))

    onchip_bytes = _p(_ffi.TK_DEVICE_ONCHIP_BYTES, "on-chip memory, bytes")
    onchip_limit_bytes = _p(_ffi.TK_DEVICE_ONCHIP_LIMIT_BYTES,
                            "scoped on-chip memory limit a pipeline must fit, bytes")
    hbm_bytes_per_s = _p(_ffi.TK_DEVICE_HBM_BYTES_PER_S, "modeled copy bandwidth")
    copy_latency_ns = _p(_ffi.TK_DEVICE_COPY_LATENCY_NS, "modeled latency per copy")
    copy_engines = _p(_ffi.TK_DEVICE_COPY_ENGINES, "modeled concurrent copies")
    compute_elems_per_s = _p(_ffi.TK_DEVICE_COMPUTE_ELEMS_PER_S, "modeled compute rate")
    layout_rows = _p(_ffi.TK_DEVICE_LAYOUT_ROWS, "rows of the layout tile")
    layout_cols = _p(_ffi.TK_DEVICE_LAYOUT_COLS, "columns of the layout tile")

    def __repr__(self):
        if self.closed:
            return "<tilekern.Device closed>"
        what = "simulated" if self.is_simulated else "real"
        return f"<tilekern.Device {self.kind!r} ({self.platform}, {what})>"
