"""Admission control: the service takes only the queries it can expect to finish in time.

A query that waits behind others (one local model answers one call at a time) is not
failing, but a query admitted behind more work than its deadline allows is abandoned at
it (504) after using the model for nothing. So the service measures its *service time*,
the busy seconds per query answered (busy: at least one query in flight; measured over
the recent past, decayed with ``memory_s``), and keeps at most
``HEADROOM x timeout / service time`` queries in flight (at least one, at most
``max_concurrent_queries``): each gets its turn within its timeout, with a tenth of it
to spare for the variance of the service time. Beyond that a query is refused at once
with 503 and a ``Retry-After`` of the expected wait.

Of the queries in flight, at most ``concurrency`` run at once (the local model, which
answers one call at a time, declares 1: the LLM's ``concurrency`` attribute); the others
wait their turn, first come first served (:meth:`Admission.turn`), so that each query
that runs has the model to itself instead of every query sharing it until all of them
time out together. A query cut off by its timeout, or abandoned by its client, is not an
answered query: its busy seconds count and it does not, so the service time measured
grows with the overload instead of falling. Before a query has been answered nothing is
measured, and only the queries that can run at once are admitted: none waits behind a
service time nobody knows.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: the share of a timeout that the expected service time of the queries in flight may fill
HEADROOM = 0.9


@dataclass(frozen=True)
class Refusal:
    """Why a query was refused, and the seconds after which a retry can expect a place."""

    message: str
    retry_after_s: int


def declared_concurrency(llm: Any) -> int | None:
    """The calls ``llm`` answers at once, as it declares them (its ``concurrency``
    attribute, an int >= 1: the local model's is 1), else None (unknown)."""
    value = getattr(llm, "concurrency", None)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


class Admission:
    """The queries in flight and the measured service time (one per app: one event loop)."""

    def __init__(
        self,
        max_in_flight: int,
        *,
        concurrency: int | None = None,
        measured: bool = True,
        memory_s: float = 60.0,
        retry_after_s: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_in_flight = max_in_flight
        #: queries that run at once (None: up to max_in_flight); the others wait their turn
        self.concurrency = max_in_flight if concurrency is None else max(1, min(concurrency, max_in_flight))
        self.measured = measured  # False: admit up to max_in_flight, whatever the service time
        self.memory_s = memory_s
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.active = 0  # admitted: running or waiting their turn
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._timeouts: Counter[float | None] = Counter()  # of the queries in flight
        self._busy = 0.0  # busy seconds, decayed
        self._done = 0.0  # answered queries, decayed
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
        """Busy seconds per answered query, recently (None before a query was answered)."""
        return self._busy / self._done if self._done > 1e-9 else None

    @property
    def waiting(self) -> int:
        """Admitted queries waiting for their turn to run."""
        return len(self._waiting)

    def _tightest(self, timeout: float | None) -> float | None:
        return min((t for t in (timeout, *self._timeouts) if t is not None), default=None)

    def capacity(self, timeout: float | None) -> int:
        """How many queries may be in flight with one whose timeout is ``timeout`` (None: none)."""
        if not self.measured:
            return self.max_in_flight
        per = self.service_s()
        if per is None:  # nothing measured: only what can run at once, none waits
            return self.concurrency
        tightest = self._tightest(timeout)
        if per <= 0 or tightest is None:
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
            measuring = " (its service time is not measured yet)" if self.measured and per is None else ""
            return Refusal(
                f"the server is answering {self.active} queries already, its limit{measuring}; retry shortly",
                self.retry_after_s,
            )
        wait = (self.active - capacity + 1) * per
        return Refusal(
            f"the server is answering {self.active} queries, as many as it can finish within "
            f"{self._tightest(timeout):g}s at about {per:.2g}s "
            f"each; retry in {math.ceil(wait)}s",
            max(1, self.retry_after_s, math.ceil(wait)),
        )

    async def turn(self) -> bool:
        """Wait until an admitted query may run (at most ``concurrency`` run at once, in the
        order they came); :meth:`done_running` gives the turn back. Whether it waited.
        Cancelled while it waits, the query leaves the line (a turn it was just given
        passes on)."""
        if self.running < self.concurrency and not self._waiting:
            self.running += 1
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.done_running()  # given the turn as it was cancelled: the next one's
            else:
                self._waiting.remove(turn)
            raise
        return True

    def done_running(self) -> None:
        """A query that had its turn has ended: the next one in line runs."""
        self.running -= 1
        while self._waiting and self.running < self.concurrency:
            turn = self._waiting.popleft()
            if not turn.done():
                self.running += 1
                turn.set_result(None)

    def release(self, timeout: float | None, *, finished: bool = True) -> None:
        """A query admitted with ``timeout`` has ended; ``finished`` False: it was cut off
        by its timeout, abandoned or refused in line, which is no measure of the service
        time (its busy seconds count, the query does not)."""
        self._advance()
        self.active -= 1
        if finished:
            self._done += 1.0
        self._timeouts[timeout] -= 1
        if not self._timeouts[timeout]:
            del self._timeouts[timeout]
