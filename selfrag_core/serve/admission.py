"""Admission control: the service takes only the queries it can expect to finish in time.

A query that waits behind others (one local model answers one call at a time) is not
failing, but a query admitted behind more work than its deadline allows is abandoned at
it (504) after using the model for nothing. So the service measures its *service time*,
the busy seconds per finished query (busy: at least one query in flight; measured over
the recent past, decayed with ``memory_s``), and keeps at most
``HEADROOM x timeout / service time`` queries in flight (at least one, at most
``max_concurrent_queries``): however the model shares its time among them, each gets its
turn within its timeout, with a tenth of it to spare for the variance of the service
time. Beyond that a query is refused at once with 503 and a ``Retry-After`` of the
expected wait. Before the first query ends nothing is measured, and up to
``max_concurrent_queries`` are admitted.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

#: the share of a timeout that the expected service time of the queries in flight may fill
HEADROOM = 0.9


@dataclass(frozen=True)
class Refusal:
    """Why a query was refused, and the seconds after which a retry can expect a place."""

    message: str
    retry_after_s: int


class Admission:
    """The queries in flight and the measured service time (one per app: one event loop)."""

    def __init__(
        self,
        max_in_flight: int,
        *,
        measured: bool = True,
        memory_s: float = 60.0,
        retry_after_s: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.measured = measured  # False: admit up to max_in_flight, whatever the service time
        self.memory_s = memory_s
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.active = 0
        self._timeouts: Counter[float | None] = Counter()  # of the queries in flight
        self._busy = 0.0  # busy seconds, decayed
        self._done = 0.0  # finished queries, decayed
        self._mark = clock()  # the time the sums were brought up to

    def _advance(self) -> None:
        now = self.clock()
        elapsed = now - self._mark
        if elapsed > 0:
            decay = math.exp(-elapsed / self.memory_s)
            self._busy = self._busy * decay + (elapsed if self.active else 0.0)
            self._done *= decay
        self._mark = now

    def service_s(self) -> float | None:
        """Busy seconds per finished query, recently (None before a query has finished)."""
        return self._busy / self._done if self._done > 1e-9 else None

    def _tightest(self, timeout: float | None) -> float | None:
        return min((t for t in (timeout, *self._timeouts) if t is not None), default=None)

    def capacity(self, timeout: float | None) -> int:
        """How many queries may be in flight with one whose timeout is ``timeout`` (None: none)."""
        per = self.service_s() if self.measured else None
        tightest = self._tightest(timeout)
        if per is None or per <= 0 or tightest is None:
            return self.max_in_flight
        return max(1, min(self.max_in_flight, int(HEADROOM * tightest / per)))

    def admit(self, timeout: float | None) -> Refusal | None:
        """Take a query whose deadline is ``timeout`` seconds away (None), or refuse it."""
        self._advance()
        capacity = self.capacity(timeout)
        if self.active < capacity:
            self.active += 1
            self._timeouts[timeout] += 1
            return None
        per = self.service_s() if self.measured else None
        if per is None or capacity == self.max_in_flight:
            return Refusal(
                f"the server is answering {self.active} queries already, its limit; retry shortly",
                self.retry_after_s,
            )
        wait = (self.active - capacity + 1) * per
        return Refusal(
            f"the server is answering {self.active} queries, as many as it can finish within "
            f"{self._tightest(timeout):g}s at about {per:.2g}s "
            f"each; retry in {math.ceil(wait)}s",
            max(1, self.retry_after_s, math.ceil(wait)),
        )

    def release(self, timeout: float | None) -> None:
        """A query admitted with ``timeout`` has ended (answered, failed or abandoned)."""
        self._advance()
        self.active -= 1
        self._done += 1.0
        self._timeouts[timeout] -= 1
        if not self._timeouts[timeout]:
            del self._timeouts[timeout]
