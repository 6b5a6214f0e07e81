"""Progress of the CLI's long steps (indexing, evaluation, the demo) on stderr.

In a terminal (and with rich installed): a bar with the count, the rate, the time left
and the time taken. Anywhere else (a log, a pipe, ``--plain``): one line when a step
starts, then one at a steady interval (every :data:`INTERVAL` seconds) whether or not
anything advanced, and one when it ends, each with the count, the rate and the time
left::

    indexing: 0/4339 chunks
    indexing: 256/4339 chunks (6%), 8.5 chunks/s, about 8 min left (30 s so far)
    indexing: done, 4339 chunks in 8 min 31 s (8.5 chunks/s)

A description given to ``advance`` (the question being answered, say) is added to the
next line; no line ever depends on one.

Code below the CLI that has long steps of its own (``evaluate`` indexing a corpus, then
answering the questions) takes a :class:`Steps`: a :class:`Progress`, or anything with
its ``task`` and ``say``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, TextIO

#: seconds between two plain progress lines
INTERVAL = 10.0


def duration(seconds: float) -> str:
    """``seconds`` for a reader: ``"42 s"``, ``"4 min 41 s"``, ``"1 h 5 min"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s < 600 else f"{round(s / 60)} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _rate(done: float, elapsed: float, unit: str) -> str:
    per_second = done / elapsed if elapsed > 0 else 0.0
    if per_second >= 1 or per_second == 0:
        return f"{per_second:.1f} {unit}/s"
    per_minute = per_second * 60
    return f"{per_minute:.1f} {unit}/min" if per_minute < 10 else f"{per_minute:.0f} {unit}/min"


def status_line(label: str, done: int, total: int, elapsed: float, unit: str) -> str:
    """One plain progress line: the count, the share, the rate and the time left, once
    anything is done (before that, the time so far)."""
    share = f" ({done / total:.0%})" if total else ""
    head = f"{label}: {done}/{total} {unit}{share}"
    if done <= 0:
        return f"{head}, {duration(elapsed)} so far" if elapsed >= 1 else head
    left = (total - done) * elapsed / done
    return f"{head}, {_rate(done, elapsed, unit)}, about {duration(left)} left ({duration(elapsed)} so far)"


class _PlainTask:
    """The plain lines of one step: at its start, every ``interval`` seconds (a ticker
    thread keeps them coming while nothing advances) and at its end."""

    def __init__(
        self, label: str, total: int, unit: str, interval: float, write: Callable[[str], None],
        clock: Callable[[], float],
    ) -> None:  # fmt: skip
        self.label, self.total, self.unit, self.interval = label, total, unit, interval
        self._write, self._clock = write, clock
        self.done = 0
        self.note: str | None = None
        self.started = self._last = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        self._emit(force=True)
        if self.interval > 0:
            self._ticker = threading.Thread(target=self._tick, name="selfrag-progress", daemon=True)
            self._ticker.start()

    def advance(self, n: int = 1, description: str | None = None) -> None:
        with self._lock:
            self.done += n
            if description:
                self.note = description
        self._emit()

    def finish(self, completed: bool) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        elapsed = self._clock() - self.started
        if completed:
            rate = f" ({_rate(self.done, elapsed, self.unit)})" if self.done and elapsed >= 1 else ""
            self._write(f"{self.label}: done, {self.done} {self.unit} in {duration(elapsed)}{rate}")

    def _tick(self) -> None:
        while not self._stop.wait(self.interval / 4):
            self._emit()

    def _emit(self, force: bool = False) -> None:
        with self._lock:
            now = self._clock()
            if not force and now - self._last < self.interval:
                return
            self._last = now
            line = status_line(self.label, self.done, self.total, now - self.started, self.unit)
            if self.note:
                line = f"{line}: {self.note}"
                self.note = None
            self._write(line)


class Steps(Protocol):
    """What shows a run's long steps as they go (:class:`Progress` is one)."""

    def task(
        self, description: str, total: int, unit: str = ...
    ) -> AbstractContextManager[Callable[..., None]]:
        """A step of ``total`` ``unit``: yields ``advance(n=1, description=None)``."""
        ...

    def say(self, text: str) -> None:
        """A line between steps."""
        ...


def _ignore(n: int = 1, description: str | None = None) -> None:
    return None


def step(
    steps: Steps | None, description: str, total: int, unit: str
) -> AbstractContextManager[Callable[..., None]]:
    """``steps.task(description, total, unit)``, or an ``advance`` that shows nothing
    when ``steps`` is None."""
    return nullcontext(_ignore) if steps is None else steps.task(description, total, unit)


class Progress:
    """Rich progress bars on stderr when it is a terminal and rich is installed (and
    not ``plain``); plain lines at a steady ``interval`` otherwise (see the module)."""

    def __init__(
        self, plain: bool = False, *, interval: float = INTERVAL, stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._stream = stream
        self._lock = threading.Lock()  # one line at a time: the ticker's and say()'s
        self.interval = interval
        self._clock = clock
        self._console: Any = None
        if not plain and self.stream.isatty():
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                self._console = Console(file=self.stream)

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @contextmanager
    def task(self, description: str, total: int, unit: str = "items") -> Iterator[Callable[..., None]]:
        """Yields ``advance(n=1, description=None)``; ``unit`` names what is counted."""
        if self._console is None:
            plain = _PlainTask(description, total, unit, self.interval, self._line, self._clock)
            plain.start()
            completed = False
            try:
                yield plain.advance
                completed = True
            finally:
                plain.finish(completed)
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        columns = (
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), TextColumn("left,"),
            TimeElapsedColumn(), TextColumn("so far"),
        )  # fmt: skip
        with RichProgress(*columns, console=self._console) as bar:
            task_id = bar.add_task(description, total=total, rate="")
            started = self._clock()

            def advance(n: int = 1, description: str | None = None) -> None:
                done = bar.tasks[0].completed + n
                rate = _rate(done, self._clock() - started, unit) if done else ""
                bar.update(task_id, advance=n, description=description, rate=rate)

            yield advance

    def say(self, text: str) -> None:
        """A line on stderr (above a running bar)."""
        if self._console is not None:
            self._console.print(text, markup=False, highlight=False)
        else:
            self._line(text)

    def _line(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()
