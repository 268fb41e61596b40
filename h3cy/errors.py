"""Exceptions raised by h3cy.  Every error from the C kernels maps to one of these."""


class H3Error(Exception):
    """Base class of every h3cy error."""


class H3ValueError(H3Error, ValueError):
    """Bad argument: wrong shape, dtype, layout, option or size."""


class CheckpointError(H3Error, ValueError):
    """A checkpoint file or folder is missing, truncated or inconsistent."""


class UnsupportedCPUError(H3Error, RuntimeError):
    """The requested instruction-set path cannot run on this CPU/OS."""


class Cancelled(H3Error):
    """A long operation stopped because its CancelToken was set.  ``step`` is the step
    (0-based) during which it stopped, when the operation has steps."""

    def __init__(self, msg="cancelled", step=None):
        super().__init__(msg)
        self.step = step


class Busy(H3Error):
    """The object is already running a long operation in another thread (blocking=False)."""
