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
import contextvars
import logging
import queue
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

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


def call_within(fn: Callable[[], T], timeout: float | None, on_timeout: Callable[[float], Exception]) -> T:
    """``fn()``, bounded by ``timeout`` seconds (None: called here, unbounded). Past it the
    call is abandoned on its daemon thread and ``on_timeout(timeout)`` is raised."""
    if timeout is None:
        return fn()
    future = CALLS.submit(fn)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError as e:
        future.cancel()  # not started yet (every thread busy): it never will be
        raise on_timeout(timeout) from e


async def to_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """``asyncio.to_thread`` on the library's own threads (see the module docstring):
    cancelling the awaiting task abandons the call."""
    return await asyncio.wrap_future(CALLS.submit(fn, *args))


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
