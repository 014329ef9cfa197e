"""The error hierarchy: everything the library raises derives from ``AluminumError``.

Messages name the argument, what was expected and what was given, e.g.
``BufferError("recvbuf: expected 1024 elements of float32, got 512 of float32")``.
Each class also derives from the closest builtin so generic ``except ValueError`` code works.
"""
import builtins


class AluminumError(Exception):
    """Base class of every error raised by aluminum."""


class BufferError(AluminumError, ValueError):
    """A buffer argument is not usable: not a buffer, wrong size/dtype/device, read-only..."""


class ArgumentError(AluminumError, ValueError):
    """A non-buffer argument is invalid: root or peer out of range, bad counts, bad op..."""


class UnsupportedError(AluminumError, NotImplementedError):
    """The backend, algorithm or dtype/op combination does not support this request."""


class CommunicatorError(AluminumError, RuntimeError):
    """The communicator cannot be used: freed, or the library is not initialized/finalized."""


class TimeoutError(AluminumError, builtins.TimeoutError):
    """An operation did not complete in time (``AL_TIMEOUT``, ``Request.wait(timeout)``)."""


class OperationError(AluminumError, RuntimeError):
    """An operation failed while it ran; the original exception is chained as ``__cause__``."""
