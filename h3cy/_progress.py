"""Progress and cancellation for every long phase: one ``Ticker`` per run counts units
(blocks, layers, stages), checks the CancelToken after each, and calls
``on_progress(done, total, phase)`` at most every PROGRESS_INTERVAL seconds — but always for
the last unit, and for any unit the caller marks as a boundary (the end of a sampler step)."""
import time

from .errors import Cancelled

PROGRESS_INTERVAL = 0.05    # seconds between on_progress reports (read at each tick)


class Ticker:
    """``tick()`` after each unit of work.

    Parameters
    ----------
    total : int — units in the phase (fixed)
    phase : str — the phase name passed to ``on_progress``
    on_progress : callable(done, total, phase) or None — may raise; the exception propagates
    cancel : h3cy.CancelToken or None
    what : str — the work's name in the Cancelled message ("video decode", ...)
    step : callable() -> int or None, optional — the step reached, carried by Cancelled
    """

    __slots__ = ("done", "total", "phase", "on_progress", "cancel", "what", "step", "_last")

    def __init__(self, total, phase, on_progress=None, cancel=None, what=None, step=None):
        self.done, self.total, self.phase = 0, int(total), phase
        self.on_progress, self.cancel = on_progress, cancel
        self.what = what or phase
        self.step = step
        self._last = 0.0

    def _cancelled(self, msg):
        return Cancelled(msg, step=None if self.step is None else self.step())

    def check(self):
        """Raise Cancelled if the token is set (before any work, between phases)."""
        if self.cancel is not None and self.cancel.cancelled:
            raise self._cancelled(f"{self.what} cancelled after {self.done} of {self.total}")

    def tick(self, boundary=False):
        self.done += 1
        self.check()
        if self.on_progress is not None:
            now = time.monotonic()
            if boundary or self.done >= self.total or now - self._last >= PROGRESS_INTERVAL:
                self._last = now
                self.on_progress(self.done, self.total, self.phase)
