"""Exceptions: one class per libtilekern status, all under TilekernError.

The Python layer raises the same classes for what it refuses itself (an
array it cannot wrap without copying, a wrong dtype), with the status the C
library gives for the same mistake."""

__all__ = [
    "TilekernError", "InvalidArgumentError", "OutOfMemoryError", "SizeOverflowError",
    "ShapeError", "DtypeError", "LayoutError", "RangeError", "CapacityError",
    "RaceError", "NotTargetError", "MismatchError", "FileError", "FormatError",
    "StateError", "CallbackError",
]


class TilekernError(Exception):
    """A negative status: ``.status`` (int), ``.name`` ("TK_ESHAPE"),
    ``.description`` (tk_strerror's text) and ``.message`` (the library's
    message naming the offending values)."""

    status = None
    name = "TK_E?"

    def __init__(self, message, description=None, status=None):
        if status is not None:
            self.status = status
            self.name = _NAMES.get(status, f"status {status}")
        self.message = message
        self.description = description if description is not None else _DESCRIPTIONS.get(
            self.status, "")
        super().__init__(f"{self.name}: {self.description}: {message}")


class InvalidArgumentError(TilekernError, ValueError):
    status, name = -1, "TK_EINVAL"


class OutOfMemoryError(TilekernError, MemoryError):
    status, name = -2, "TK_ENOMEM"


class SizeOverflowError(TilekernError, OverflowError):
    status, name = -3, "TK_EOVERFLOW"


class ShapeError(TilekernError, ValueError):
    status, name = -4, "TK_ESHAPE"


class DtypeError(TilekernError, TypeError):
    status, name = -5, "TK_EDTYPE"


class LayoutError(TilekernError, ValueError):
    status, name = -6, "TK_ELAYOUT"


class RangeError(TilekernError, ValueError):
    status, name = -7, "TK_ERANGE"


class CapacityError(TilekernError):
    status, name = -8, "TK_ECAPACITY"


class RaceError(TilekernError):
    status, name = -9, "TK_ERACE"


class NotTargetError(TilekernError):
    status, name = -10, "TK_ENOTARGET"


class MismatchError(TilekernError):
    status, name = -11, "TK_EMISMATCH"


class FileError(TilekernError):
    status, name = -12, "TK_EIO"


class FormatError(TilekernError, ValueError):
    status, name = -13, "TK_EFORMAT"


class StateError(TilekernError):
    status, name = -14, "TK_ESTATE"


class CallbackError(TilekernError):
    status, name = -15, "TK_ECALLBACK"


_CLASSES = {cls.status: cls for cls in (
    InvalidArgumentError, OutOfMemoryError, SizeOverflowError, ShapeError, DtypeError,
    LayoutError, RangeError, CapacityError, RaceError, NotTargetError, MismatchError,
    FileError, FormatError, StateError, CallbackError)}
_NAMES = {s: c.name for s, c in _CLASSES.items()}
# tk_strerror's texts fill .description for errors the Python layer raises;
# the ones the library raises carry the library's own text.
_DESCRIPTIONS = {}


def from_status(status, description, message):
    """The exception for a status returned by the library."""
    cls = _CLASSES.get(status)
    if cls is None:
        return TilekernError(message, description, status)
    return cls(message, description)
