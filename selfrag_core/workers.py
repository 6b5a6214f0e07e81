"""Threads the library owns for blocking work.

Sync-only LLMs and backends are called on these threads whenever the call must be
bounded in time (a sync call under ``llm_timeout`` / ``retrieval_timeout``) or must not
block an event loop (a sync call from ``aquery``), and the sync driver runs a plan's
parallel tasks on them. Two properties matter, and neither holds for the executors of
``concurrent.futures`` or the loop's default executor:

* **Nothing outlives its query by holding up the interpreter.** A call that timed out
  is abandoned: its thread runs on until the call returns, but it is a daemon thread,
  so it never keeps the interpreter from exiting (``concurrent.futures`` joins its
  worker threads at exit, so one hung call hangs ``exit()``).
* **An abandoned call never starves other queries.** A new thread is started whenever
  no idle one can take the work, up to ``max_threads``; hung calls therefore take only
  their own threads (the loop's default executor has ``min(32, cpus + 4)`` threads, and
  four hung queries took all of them). Idle threads end after ``idle_s`` seconds.

Past ``max_threads`` busy threads, work waits for a thread, and its caller's timeout
still applies.

* **Nothing runs or logs after interpreter shutdown** (:func:`shutting_down`: from when
  the main thread ends, the moment ``concurrent.futures`` stops taking work too): no
  work starts on these threads any more, and what an abandoned call still does on one
  is not logged (the ``selfrag`` logger drops their records), so a call a timeout gave
  up on prints no fallback or traceback while the program exits.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import concurrent.futures.thread  # its exit hook first: they run last-in first-out (see below)
import contextlib
import contextvars
import functools
import logging
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = [
    "CALLS",
    "TASKS",
    "Limit",
    "Workers",
    "awaited_within",
    "blocking",
    "call_within",
    "shutting_down",
    "taking",
    "to_thread",
    "unsuspended",
]

T = TypeVar("T")

_Work = tuple["concurrent.futures.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...]]

_EXITING = threading.Event()
# threading's exit hooks run when the main thread ends, before non-daemon threads are
# joined and before atexit's (concurrent.futures refuses work from its own hook, after ours)
getattr(threading, "_register_atexit", atexit.register)(_EXITING.set)
_THREAD_PREFIX = "selfrag-"


def shutting_down() -> bool:
    """Whether the interpreter is exiting (its main thread has ended): no work starts on
    the library's threads any more, and their log records are dropped."""
    return _EXITING.is_set() or sys.is_finalizing()


def _shutdown_error() -> RuntimeError:
    return RuntimeError("cannot start a selfrag call after interpreter shutdown")


def _not_after_shutdown(record: logging.LogRecord) -> bool:
    """The ``selfrag`` logger's filter: nothing from the library's threads once the
    interpreter is exiting (a call abandoned by a timeout would log as the program ends)."""
    return not (shutting_down() and threading.current_thread().name.startswith(_THREAD_PREFIX))


logging.getLogger("selfrag").addFilter(_not_after_shutdown)


class Workers:
    """A growing pool of daemon threads; ``submit`` returns a ``concurrent.futures.Future``
    and runs the function in a copy of the caller's context (as ``asyncio.to_thread``)."""

    def __init__(self, name: str, max_threads: int | None, *, idle_s: float = 30.0) -> None:
        self.name = name
        self.max_threads = max_threads
        self.idle_s = idle_s
        self._queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for work
        self._pending = 0  # work not yet taken by a thread

    @property
    def threads(self) -> int:
        """Threads alive now (busy or idle)."""
        return self._threads

    def submit(self, fn: Callable[..., T], /, *args: Any) -> concurrent.futures.Future[T]:
        if shutting_down():
            raise _shutdown_error()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._pending += 1
            start = self._pending > self._idle and (
                self.max_threads is None or self._threads < self.max_threads
            )
            if start:
                self._threads += 1
                self._idle += 1
        self._queue.put((future, contextvars.copy_context(), fn, args))
        if start:
            threading.Thread(target=self._work, name=_THREAD_PREFIX + self.name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, context, fn, args = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._pending < self._idle:  # the other idle threads can take it all
                        self._threads -= 1
                        self._idle -= 1
                        return
                continue
            with self._lock:
                self._pending -= 1
                self._idle -= 1
            try:
                if future.set_running_or_notify_cancel():  # False: the caller gave up first
                    try:
                        if shutting_down():  # queued before the interpreter began to exit
                            raise _shutdown_error()
                        future.set_result(context.run(fn, *args))
                    except BaseException as e:  # handed to the caller, as an executor does
                        future.set_exception(e)
            finally:
                del future, context, fn, args
                with self._lock:
                    self._idle += 1


#: blocking calls into user code (sync LLMs and backends): bounded
CALLS = Workers("call", max_threads=64)
#: the sync driver's parallel tasks: they only wait on calls, which are bounded above
TASKS = Workers("task", max_threads=None)


def call_within(
    fn: Callable[[], T],
    timeout: float | None,
    on_timeout: Callable[[Limit], Exception],
    deadline: float | None = None,
) -> T:
    """``fn()``, bounded by ``timeout`` seconds from when a thread starts it and by ``deadline``
    (see :class:`Limit`; both None: called here, unbounded). Past them the call is abandoned
    on its daemon thread and ``on_timeout(limit)`` is raised."""
    if timeout is None and deadline is None:
        return fn()
    limit = Limit(timeout, deadline, waiting=True)  # until a thread takes it
    changed = threading.Event()
    limit.on_change = changed.set
    future: concurrent.futures.Future[T] = CALLS.submit(limit.run, fn)
    future.add_done_callback(lambda _: changed.set())
    while not future.done():
        left = limit.left()
        if left is not None and left <= 0:
            limit.abandoned = True
            future.cancel()  # not started yet (every thread busy): it never will be
            raise on_timeout(limit)
        changed.wait(left)
        changed.clear()  # the state is read again above, so a change in between is not lost
    return future.result()


async def to_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """``asyncio.to_thread`` on the library's own threads (see the module docstring):
    cancelling the awaiting task abandons the call. Under a :class:`Limit` (an LLM call or a
    retrieval bounded by :func:`awaited_within`), the wait for a thread is not charged to
    the call's own timeout."""
    limit = _LIMIT.get()
    if limit is None:
        return await asyncio.wrap_future(CALLS.submit(fn, *args))
    limit.wait()  # until a thread takes it
    return await asyncio.wrap_future(CALLS.submit(limit.run, functools.partial(fn, *args)))


def blocking(fn: Callable[..., T]) -> Callable[..., Coroutine[Any, Any, T]]:
    """``fn`` as a coroutine function that never suspends (see :func:`unsuspended`): how
    one async implementation serves a sync caller, its calls injected as blocking ones."""

    async def call(*args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    return call


def unsuspended(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends: shared async logic run from sync
    code, its waits and calls blocking (:func:`blocking`)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("the coroutine suspended")  # pragma: no cover


#: the bounded call this context runs in (see :func:`taking`)
_LIMIT: contextvars.ContextVar[Limit | None] = contextvars.ContextVar("selfrag_limit", default=None)


class Limit:
    """How long one bounded call (an LLM attempt, a retrieval) may take.

    It may run ``timeout`` seconds from its start (the component's own limit:
    ``llm_timeout``, ``retrieval_timeout``) and never past ``deadline`` (the query's, a
    ``time.perf_counter()`` instant). Time spent waiting before it starts, for one of these
    threads or for a component's lock (:func:`taking`), counts against the deadline only
    (without one, against ``timeout`` from the call, so nothing waits forever): queueing
    is not a fault of the component. ``on_change`` is told when the end moves.
    """

    def __init__(
        self, timeout: float | None, deadline: float | None = None, *, waiting: bool = False
    ) -> None:
        self.timeout, self.deadline = timeout, deadline
        self.created = time.perf_counter()
        self.started: float | None = None if waiting else self.created
        self._waited = 0.0  # seconds spent waiting in the waits that ended
        self.abandoned = False  # the caller gave up: a call still waiting must not start
        self.on_change: Callable[[], None] | None = None
        self._waiting_since = self.created

    def _own_end(self) -> float | None:
        if self.timeout is None or (self.started is None and self.deadline is not None):
            return None  # no own limit, or waiting under a deadline
        return (self.created if self.started is None else self.started) + self.timeout

    def end(self) -> float | None:
        """The ``perf_counter()`` instant the call must end by (None: no limit)."""
        return min((t for t in (self._own_end(), self.deadline) if t is not None), default=None)

    @property
    def waited(self) -> float:
        """Seconds the call has spent waiting for its turn (so far)."""
        now = time.perf_counter()
        return self._waited + (now - self._waiting_since if self.started is None else 0.0)

    def left(self) -> float | None:
        end = self.end()
        return None if end is None else end - time.perf_counter()

    def by_deadline(self) -> bool:
        """Whether the deadline, not the own timeout, is the limit that ends the call."""
        own = self._own_end()
        return self.deadline is not None and (own is None or self.deadline <= own)

    def wait(self) -> None:
        """The call waits (for a lock): from now on only the deadline bounds it."""
        self._waiting_since, self.started = time.perf_counter(), None
        self._changed()

    def start(self) -> None:
        """The call starts: its own timeout counts from now."""
        now = time.perf_counter()
        if self.started is None:
            self._waited += now - self._waiting_since
        self.started = now
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread that took it: the call starts now."""
        self.start()
        _LIMIT.set(self)  # in the work's own context (see Workers.submit)
        return fn()


@contextlib.contextmanager
def taking(lock: threading.Lock) -> Iterator[None]:
    """``with lock:`` for a component that serves one call at a time (a local model): the
    wait for ``lock`` counts against the query's deadline, not against the call's own
    timeout (see :class:`Limit`), and a call whose caller gave up while it waited never
    runs (it would only delay the calls queued behind it)."""
    limit = _LIMIT.get()
    if limit is None:
        with lock:
            yield
        return
    limit.wait()
    while not lock.acquire(timeout=-1 if limit.end() is None else max(limit.left() or 0.0, 0.0) + 0.05):
        if limit.abandoned:  # (past the end the caller gives up at once: it is told first)
            raise TimeoutError("the caller gave up while this call waited for its turn")
    try:
        if limit.abandoned:
            raise TimeoutError("the caller gave up while this call waited for its turn")
        limit.start()
        yield
    finally:
        lock.release()


async def awaited_within(
    awaitable: Awaitable[T], limit: Limit, on_timeout: Callable[[Limit], Exception]
) -> T:
    """``await awaitable`` within ``limit`` (the async twin of :func:`call_within`): past it
    the awaitable is cancelled and ``on_timeout(limit)`` raised; the components it calls
    (on threads too) see the limit, so their waits for a lock are not charged to it."""
    token = _LIMIT.set(limit)
    loop = asyncio.get_running_loop()
    returned = False
    try:
        result = await _bounded(awaitable, limit, loop)
        returned = True
    except _Expired as e:
        raise on_timeout(limit) from e
    finally:
        limit.abandoned = not returned  # timed out, or cancelled (the client went away)
        limit.on_change = None
        _LIMIT.reset(token)
    return result


def _loop_time(loop: asyncio.AbstractEventLoop, limit: Limit) -> float | None:
    left = limit.left()
    return None if left is None else loop.time() + left


def _soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Callable[[], None]:
    """``callback`` called on ``loop`` from any thread (nothing once the loop is closed)."""

    def call() -> None:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(callback)

    return call


class _Expired(Exception):
    """The limit of :func:`_bounded` passed (not a TimeoutError of the awaitable's own)."""


async def _bounded(awaitable: Awaitable[T], limit: Limit, loop: asyncio.AbstractEventLoop) -> T:
    if sys.version_info >= (3, 11):  # asyncio.timeout_at runs it in this task and can be moved
        scope = asyncio.timeout_at(_loop_time(loop, limit))
        inside = [True]

        def move() -> None:
            if inside:
                scope.reschedule(_loop_time(loop, limit))

        limit.on_change = _soon(loop, move)
        try:
            async with scope:
                return await awaitable
        except TimeoutError:
            if scope.expired():
                raise _Expired from None
            raise
        finally:
            inside.clear()
    task = asyncio.ensure_future(awaitable)  # pragma: no cover - Python 3.10
    changed = asyncio.Event()
    limit.on_change = _soon(loop, changed.set)
    try:
        while not task.done():
            left = limit.left()
            if left is not None and left <= 0:
                raise _Expired
            changed.clear()
            waiter = asyncio.ensure_future(changed.wait())
            await asyncio.wait({task, waiter}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        return task.result()
    finally:
        task.cancel()
