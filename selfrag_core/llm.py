"""Calling any LLM: duck-typed dispatch, retries with back-off, timeouts, usage.

Accepted LLMs (checked in this order, without importing any framework):

* LangChain runnables (chat models, LLMs, chains): ``invoke`` / ``ainvoke``; the
  reply may be a string or a message whose ``.text`` / ``.content`` (a string or a
  list of content blocks) holds the answer; ``usage_metadata`` feeds token counts.
* LlamaIndex LLMs: ``complete`` / ``acomplete`` returning an object with ``.text``.
* Objects with ``generate(prompt)`` and optionally ``agenerate`` / ``generate_async``;
  with ``generate_structured(prompt, schema)`` / ``agenerate_structured`` for the
  JSON steps (see ``protocols.StructuredLLM``).
* Plain callables ``f(prompt) -> str`` (sync or async).

An async-only LLM works from sync code too (its coroutine runs on a private loop in
a worker thread, never on a loop that is already running).
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import functools
import inspect
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base, wait_exponential

from selfrag_core import frameworks
from selfrag_core.errors import (
    BudgetExceededError,
    ConfigurationError,
    LLMCallError,
    LLMTimeoutError,
    QueryTimeoutError,
    RAGSystemError,
    _status_of,
    misconfiguration_hint,
    misconfigured,
)
from selfrag_core.frameworks import Getter, Resolutions
from selfrag_core.protocols import LLMOutput
from selfrag_core.workers import CALLS, Limit, awaited_within, call_within, to_thread

Hook = Callable[[], None]
TokenSink = Callable[[str], None]
T = TypeVar("T")


@dataclass
class LLMReply:
    text: str
    attempts: int = 1
    input_tokens: int | None = None
    output_tokens: int | None = None
    fallbacks: tuple[tuple[str, str], ...] = ()  # see LLMOutput.fallbacks
    #: the reply's length when ``max_chars`` cut it (``text`` is what was kept), else None
    truncated_from: int | None = None


def _async_capable(llm: object) -> bool:
    if frameworks.is_langchain_runnable(llm):
        return hasattr(llm, "ainvoke")
    if frameworks.is_llamaindex_llm(llm):
        return hasattr(llm, "acomplete")
    return any(hasattr(llm, name) for name in ("agenerate", "generate_async")) or is_coroutine_callable(llm)


def llm_identity(llm: Any) -> dict[str, str]:
    """Who answers a call to ``llm``, as far as it tells: ``provider``, ``model`` (left out
    when unknown) and ``operation`` (``"chat"`` for a chat model, else
    ``"text_completion"``): OpenTelemetry's ``gen_ai.provider.name``,
    ``gen_ai.request.model`` and ``gen_ai.operation.name``. LangChain models tell them by
    their LangSmith parameters, LlamaIndex LLMs by their metadata, the core's OpenAI and
    local LLMs by their settings; any other LLM by its ``provider`` and ``model_name`` or
    ``model`` attributes, else its provider is the package of its class."""
    names = frameworks.mro_names(llm)
    if "CachedLLM" in names and getattr(llm, "llm", None) is not None:
        return llm_identity(llm.llm)
    provider, model, chat = _told_identity(llm, names)
    if model is None:
        named = getattr(llm, "model_name", None) or getattr(llm, "model", None)
        model = named if isinstance(named, str) else None
    if not isinstance(provider, str) or not provider:
        provider = str(getattr(type(llm), "__module__", None) or "unknown").partition(".")[0]
        if provider in ("builtins", "__main__"):  # a plain function's module names the caller
            provider = str(getattr(llm, "__module__", None) or "unknown").partition(".")[0]
    identity = {"provider": provider, "operation": "chat" if chat else "text_completion"}
    if model and model != "unknown":
        identity["model"] = model
    return identity


def _told_identity(llm: Any, names: frozenset[str]) -> tuple[Any, Any, bool]:
    """The provider, model and whether it chats, as ``llm`` tells them (its class's
    ``names``): a LangChain model's LangSmith parameters, a LlamaIndex LLM's metadata, the
    core's OpenAI and local LLMs' settings; else its ``provider`` attribute, no model."""
    provider, model, chat = getattr(llm, "provider", None), None, False
    if frameworks.is_langchain_runnable(llm):
        try:
            params = llm._get_ls_params()
        except (AttributeError, TypeError, ValueError, KeyError):  # a chain, not a model
            params = {}
        provider, model = params.get("ls_provider") or provider, params.get("ls_model_name")
        chat = params.get("ls_model_type") == "chat"
    elif frameworks.is_llamaindex_llm(llm):
        meta = getattr(llm, "metadata", None)
        model, chat = getattr(meta, "model_name", None), bool(getattr(meta, "is_chat_model", False))
        named = llm.class_name() if hasattr(llm, "class_name") else type(llm).__name__
        provider = provider or str(named).lower()
    elif "OpenAICompatibleLLM" in names:
        provider, model, chat = "openai", llm.model, True
    elif "LocalLLM" in names:
        provider, model, chat = "llama_cpp", llm.name, bool(llm.chat)
    return provider, model, chat


def is_coroutine_callable(obj: Any) -> bool:
    """Whether calling ``obj`` returns a coroutine (async function or async __call__)."""
    if inspect.iscoroutinefunction(obj):
        return True
    return callable(obj) and inspect.iscoroutinefunction(type(obj).__call__)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            block if isinstance(block, str) else str(block.get("text", ""))
            for block in content
            if isinstance(block, str) or (isinstance(block, dict) and block.get("type", "text") == "text")
        )
    return "" if content is None else str(content)


def to_reply(raw: Any) -> LLMReply:
    """Normalise any LLM return value to text plus token usage."""
    if isinstance(raw, LLMOutput):
        return LLMReply(
            raw.text, input_tokens=raw.input_tokens, output_tokens=raw.output_tokens, fallbacks=raw.fallbacks
        )
    if isinstance(raw, str):
        return LLMReply(raw)
    if isinstance(raw, dict):
        return LLMReply(_content_text(raw.get("text", raw.get("content", ""))))
    usage = getattr(raw, "usage_metadata", None)
    text_attr = getattr(raw, "text", None)
    if callable(text_attr) and not isinstance(text_attr, str):  # langchain-core < 1.0 had .text()
        text_attr = text_attr()
    if isinstance(text_attr, str) and (text_attr or getattr(raw, "content", None) in (None, "", [])):
        text = text_attr
    else:
        text = _content_text(getattr(raw, "content", text_attr))
    reply = LLMReply(text)
    if isinstance(usage, dict):
        reply.input_tokens = usage.get("input_tokens")
        reply.output_tokens = usage.get("output_tokens")
    else:
        raw_obj = getattr(raw, "raw", None)
        raw_usage = raw_obj.get("usage") if isinstance(raw_obj, dict) else getattr(raw_obj, "usage", None)
        if raw_usage is not None and not isinstance(raw_usage, dict):
            raw_usage = vars(raw_usage) if hasattr(raw_usage, "__dict__") else None
        if isinstance(raw_usage, dict):
            reply.input_tokens = raw_usage.get("prompt_tokens")
            reply.output_tokens = raw_usage.get("completion_tokens")
    return reply


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``, raising :class:`TimeoutError` (``asyncio.TimeoutError``) once
    ``seconds`` have passed; None means no limit. On Python 3.11+ this is
    ``asyncio.timeout``, which runs the awaitable in the calling task: ``wait_for`` there
    wraps it in a task of its own, one more task per LLM call."""
    if seconds is None:
        return await awaitable
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def run_coroutine_sync(factory: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine from sync code, whether or not this thread has a running loop."""

    async def main() -> Any:
        return await factory()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    # on a thread of the library's own (the caller's context, e.g. LangChain's run
    # config, goes along)
    return CALLS.submit(asyncio.run, main()).result()


def _generate_methods(
    llm: object, hold: Callable[[str | None, object], Getter], source: Getter, native_async: bool
) -> tuple[Getter | None, Getter | None]:
    """The getters of ``llm``'s plain sync and async calls: a LangChain model's ``invoke``
    and ``ainvoke``, a LlamaIndex LLM's ``complete`` and ``acomplete``; else its
    ``generate`` (or ``invoke``, ``complete``; or itself when it is a sync callable) and
    its ``agenerate`` (or ``generate_async``; or itself when calling it returns a coroutine)."""
    langchain, llamaindex = frameworks.is_langchain_runnable(llm), frameworks.is_llamaindex_llm(llm)
    if langchain or llamaindex:
        name, aname = ("invoke", "ainvoke") if langchain else ("complete", "acomplete")
        return hold(name, getattr(llm, name)), hold(aname, getattr(llm, aname, None))
    plain: Getter | None = None
    aplain: Getter | None = None
    sync_name = next((n for n in ("generate", "invoke", "complete") if hasattr(llm, n)), None)
    if sync_name is not None:
        plain = hold(sync_name, getattr(llm, sync_name))
    elif not native_async and callable(llm):
        plain = source
    async_name = next((n for n in ("agenerate", "generate_async") if hasattr(llm, n)), None)
    if async_name is not None:
        aplain = hold(async_name, getattr(llm, async_name))
    elif is_coroutine_callable(llm):
        aplain = source
    return plain, aplain


class LLMClient:
    """An LLM resolved once (:func:`resolve_llm`): the one contract the engine calls. What
    the object is (a LangChain runnable, a LlamaIndex LLM, an object with ``generate`` /
    ``agenerate`` and their structured forms, a sync or async callable) and which of its
    methods a call, a structured call (``schema``) and a streamed call reach are decided
    when it is resolved; a call only calls.

    :meth:`generate` / :meth:`agenerate` return what the LLM returned (a string, an
    ``LLMOutput``, a message...: :func:`to_reply` reads it); :meth:`stream` /
    :meth:`astream` send the text to a sink as it comes (when :attr:`streams`);
    :meth:`aping` asks it whether it is up, without a generation (when :attr:`pings`). It
    holds the object weakly: it serves while the object lives.
    """

    __slots__ = (
        "__weakref__",
        "_agenerate",
        "_aping",
        "_astream",
        "_astream_awaited",
        "_astructured",
        "_generate",
        "_ping",
        "_source",
        "_stream",
        "_structured",
        "native_async",
        "streams",
    )

    def __init__(self, llm: object, hold: Callable[[str | None, object], Getter]) -> None:
        self._source = hold(None, llm)
        found = {
            name: hold(name, getattr(llm, name))
            for name in ("generate_structured", "agenerate_structured", "stream", "astream")
            if hasattr(llm, name)
        }
        self._structured, self._astructured = (
            found.get("generate_structured"),
            found.get("agenerate_structured"),
        )
        self._aping, self._ping = (
            hold(name, method) if callable(method := getattr(llm, name, None)) else None
            for name in ("aping", "ping")
        )
        #: whether the LLM has a native async path (no thread needed)
        self.native_async = _async_capable(llm)
        llamaindex = frameworks.is_llamaindex_llm(llm)
        self._generate, self._agenerate = _generate_methods(llm, hold, self._source, self.native_async)
        #: whether the LLM streams text: LangChain ``stream``, LlamaIndex ``stream_complete``,
        #: or an object with ``stream(prompt) -> Iterator[str]`` / ``astream`` (pieces may
        #: also be ``LLMOutput``, to report token counts; see :func:`_chunk_usage`)
        self.streams = any(
            hasattr(llm, n) for n in ("stream", "astream", "stream_complete", "astream_complete")
        )
        self._stream, self._astream, self._astream_awaited = found.get("stream"), found.get("astream"), False
        if llamaindex and hasattr(llm, "stream_complete"):
            self._stream = hold("stream_complete", llm.stream_complete)  # type: ignore[attr-defined]
        if llamaindex and hasattr(llm, "astream_complete"):
            self._astream = hold("astream_complete", llm.astream_complete)  # type: ignore[attr-defined]
            self._astream_awaited = True

    @property
    def source(self) -> object:
        """The object resolved."""
        return self._source()

    @property
    def pings(self) -> bool:
        """Whether the LLM says if it is up without a generation: an ``aping()`` or a
        ``ping()`` (an ``OpenAICompatibleLLM`` asks its server for its models)."""
        return self._aping is not None or self._ping is not None

    async def aping(self) -> Any:
        """The LLM's ``aping()``, else its ``ping()`` in a worker thread: what it answers
        (False: it is not up). A TypeError when it has neither (see :attr:`pings`)."""
        if self._aping is not None:
            return await self._aping()()
        if self._ping is not None:
            return await to_thread(self._ping())
        raise TypeError(f"{type(self.source).__name__} has no ping() or aping()")

    def generate(self, prompt: str, schema: dict[str, Any] | None = None) -> Any:
        """One call: the structured method when there is a ``schema`` and the LLM has one."""
        if schema is not None and self._structured is not None:
            return self._structured()(prompt, schema)
        if self._generate is not None:
            return self._generate()(prompt)
        if self.native_async:
            return run_coroutine_sync(lambda: self.agenerate(prompt, schema))
        source = self._source()
        raise TypeError(
            f"{type(source).__name__} is not an LLM: give an object with generate(prompt), "
            "a LangChain model, a LlamaIndex LLM or a callable"
        )

    async def agenerate(self, prompt: str, schema: dict[str, Any] | None = None) -> Any:
        """Async :meth:`generate`: the LLM's async API where it has one, else the sync
        call in a worker thread."""
        if schema is not None and self._astructured is not None:
            return await self._astructured()(prompt, schema)
        if schema is not None and self._structured is not None:
            return await to_thread(self._structured(), prompt, schema)
        if self._agenerate is not None:
            return await self._agenerate()(prompt)
        return await to_thread(self.generate, prompt, schema)

    def stream(self, prompt: str, sink: TokenSink) -> LLMReply:
        """One streamed call: its text goes to ``sink`` as it comes."""
        if self._stream is None:  # async-only streaming from sync code
            return run_coroutine_sync(lambda: self.astream(prompt, sink))  # type: ignore[no-any-return]
        reply = LLMReply("")
        parts: list[str] = []
        for chunk in self._stream()(prompt):
            _take(chunk, reply, parts, sink)
        reply.text = "".join(parts)
        return reply

    async def astream(self, prompt: str, sink: TokenSink) -> LLMReply:
        """Async :meth:`stream`."""
        if self._astream is None:
            return await to_thread(self.stream, prompt, sink)
        reply = LLMReply("")
        parts: list[str] = []
        chunks = self._astream()(prompt)
        if self._astream_awaited or inspect.isawaitable(chunks):
            chunks = await chunks
        async for chunk in chunks:
            _take(chunk, reply, parts, sink)
        reply.text = "".join(parts)
        return reply


def _take(chunk: object, reply: LLMReply, parts: list[str], sink: TokenSink) -> None:
    """One streamed piece: its text kept and sent on, its token counts on ``reply``."""
    text = _chunk_text(chunk)
    _chunk_usage(chunk, reply)
    if text:
        parts.append(text)
        sink(text)


_RESOLVED: Resolutions[LLMClient] = Resolutions()


def resolve_llm(llm: object) -> LLMClient:
    """``llm`` (anything :data:`~selfrag_core.protocols.LLMLike`) as the one contract the
    engine calls, an :class:`LLMClient`: decided once per object (and kept while it
    lives), so that a call does no recognition or attribute work. An
    :class:`LLMClient` is returned as it is."""
    if type(llm) is LLMClient:
        return llm
    return _RESOLVED.get(llm, LLMClient)


def _invoke_once(llm: object, prompt: str, schema: dict[str, Any] | None) -> Any:
    """One call of ``llm`` (see :meth:`LLMClient.generate`)."""
    return resolve_llm(llm).generate(prompt, schema)


async def _ainvoke_once(llm: object, prompt: str, schema: dict[str, Any] | None) -> Any:
    """One async call of ``llm`` (see :meth:`LLMClient.agenerate`)."""
    return await resolve_llm(llm).agenerate(prompt, schema)


def _check_text(reply: LLMReply, max_chars: int | None) -> LLMReply:
    """``reply`` cut to its first ``max_chars`` characters (None: no limit), the cut
    recorded on it; an empty reply raises ``ValueError`` (a failed attempt)."""
    if max_chars is not None and len(reply.text) > max_chars:
        reply.truncated_from, reply.text = len(reply.text), reply.text[:max_chars]
    if not reply.text or not reply.text.strip():
        raise ValueError("the LLM returned an empty reply")
    return reply


def _llm_timeout(limit: Limit) -> LLMTimeoutError:
    """The error of an attempt past its ``timeout`` (the engine names its own limits:
    ``Run.llm_timed_out``)."""
    return LLMTimeoutError(
        f"LLM call timed out after {limit.timeout or 0:.3g}s; raise ExecutionConfig.llm_timeout"
    )


def _checked(llm: object, exc: BaseException) -> BaseException:
    """``exc`` from ``llm``'s client, or the :class:`ConfigurationError` it stands for
    (a programming or configuration error, which no retry mends)."""
    hint = misconfiguration_hint(exc) if isinstance(exc, Exception) else None
    return exc if hint is None else misconfigured("LLM", llm, exc, hint)


#: errors that end an LLM call at once (no retry): the query's budget or deadline is
#: spent, or the call can never succeed
_FATAL = (BudgetExceededError, QueryTimeoutError, ConfigurationError)


def _retryable(exc: BaseException) -> bool:
    # a cancelled task (asyncio.CancelledError, a BaseException) must stop, never be retried
    return isinstance(exc, Exception) and not isinstance(exc, _FATAL)


#: the longest wait a server's ``Retry-After`` gets (a longer one is cut to this)
RETRY_AFTER_MAX_S = 30.0


def retry_after(exc: BaseException | None) -> float | None:
    """The seconds a rate-limited or unavailable server (HTTP 429 or 503) asked to wait
    before a retry: the ``retry-after-ms`` or ``Retry-After`` header (seconds or an HTTP
    date) of the error's ``response`` (the openai client's errors, httpx's, requests'),
    at most :data:`RETRY_AFTER_MAX_S`; None when the error carries none."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None)
    if exc is None or _status_of(exc) not in (429, 503) or not hasattr(headers, "get"):
        return None
    millis, value = headers.get("retry-after-ms"), headers.get("retry-after") or headers.get("Retry-After")
    try:
        seconds = float(millis) / 1000 if millis is not None else float(value)
    except (TypeError, ValueError):
        try:
            when = email.utils.parsedate_to_datetime(str(value))
        except (TypeError, ValueError):
            return None
        seconds = when.replace(tzinfo=when.tzinfo or datetime.timezone.utc).timestamp() - time.time()
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S) if math.isfinite(seconds) else None


class _WaitRetryAfter(wait_base):
    """The wait the server asked for (:func:`retry_after`) after an attempt whose error
    carries one, else ``otherwise``'s. The engine's sleep never waits past the query's
    deadline: it raises QueryTimeoutError instead."""

    def __init__(self, otherwise: wait_base) -> None:
        self.otherwise = otherwise

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        asked = retry_after(outcome.exception()) if outcome is not None and outcome.failed else None
        return self.otherwise(retry_state) if asked is None else asked


@functools.lru_cache(maxsize=64)
def _policy(retries: int, initial_wait: float, max_wait: float) -> dict[str, Any]:
    """tenacity's arguments (stateless strategies, so one set serves every call alike;
    read-only: it is passed as ``**policy``)."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    return {
        "stop": stop_after_attempt(retries + 1),
        "wait": _WaitRetryAfter(wait_exponential(multiplier=initial_wait, max=max_wait)),
        "retry": retry_if_exception(_retryable),
        "reraise": True,
    }


def _exhausted(exc: BaseException, attempts: int, purpose: str) -> LLMCallError:
    if isinstance(exc, LLMCallError):
        exc.attempts = attempts
        return exc
    what = f" ({purpose})" if purpose else ""
    return LLMCallError(
        f"LLM call{what} failed after {attempts} attempt(s): {type(exc).__name__}: {exc}. "
        "Check that the model is reachable, or raise llm_retries / llm_timeout.",
        attempts=attempts,
        purpose=purpose,
    )


def _stopped(error: RAGSystemError, failed: list[Exception]) -> RAGSystemError:
    """``error`` (the budget or the deadline refused the next attempt, or the call can
    never succeed) with the attempts the LLM received (``failed``: their errors); a
    refused retry names the failure it would have retried."""
    if failed and failed[-1] is not error:
        last = f" (the last attempt failed with {type(failed[-1]).__name__}: {failed[-1]})"
        if isinstance(error, QueryTimeoutError):
            error = QueryTimeoutError(f"{error}{last}")
        elif isinstance(error, BudgetExceededError):
            error = BudgetExceededError(f"{error}{last}", limit=error.limit)
    error.attempts = len(failed)
    return error


def _replaying(first: Exception, attempt: Callable[[], T]) -> Callable[[], T]:
    """``attempt``, except that its first call raises ``first`` again: tenacity then judges
    the attempt that already failed exactly as if it had run it (same retry test, waits
    and stop), and only a failed first attempt pays for tenacity's bookkeeping."""
    pending = [first]

    def again() -> T:
        if pending:
            raise pending.pop()
        return attempt()

    return again


def _retry_sync(
    attempt_fn: Callable[[], LLMReply],
    retries: int,
    purpose: str,
    before_attempt: Hook | None,
    sleep: Callable[[float], None] | None,
    initial_wait: float,
    max_wait: float,
    max_chars: int | None = None,
) -> LLMReply:
    """One attempt; if it fails, tenacity's sync driver (shared by call and stream)."""
    policy = _policy(retries, initial_wait, max_wait)  # validated before any attempt
    failed: list[Exception] = []  # the error of each attempt the LLM received but the last

    def attempt() -> LLMReply:
        if before_attempt is not None:
            before_attempt()  # raises when the budget or the deadline refuses the attempt
        try:
            reply = _check_text(attempt_fn(), max_chars)
        except Exception as e:
            failed.append(e)
            raise
        reply.attempts = len(failed) + 1
        return reply

    try:
        try:
            return attempt()  # most calls succeed at once: no retry state to build
        except Exception as e:
            if retries == 0 or not _retryable(e):
                raise
            again = _replaying(e, attempt)
        retrying = Retrying(sleep=sleep or time.sleep, **policy)
        for state in retrying:
            with state:
                return again()
    except _FATAL as e:
        raise _stopped(e, failed) from failed[-1] if failed else None
    except Exception as e:
        raise _exhausted(e, len(failed), purpose) from e
    raise AssertionError("unreachable")  # pragma: no cover


async def _retry_async(
    attempt_fn: Callable[[], Awaitable[LLMReply]],
    retries: int,
    purpose: str,
    before_attempt: Hook | None,
    sleep: Callable[[float], Awaitable[None]] | None,
    initial_wait: float,
    max_wait: float,
    max_chars: int | None = None,
) -> LLMReply:
    """One attempt; if it fails, tenacity's async driver (same policy): the retry state
    is built only for a call that failed once (``benchmarks/bench_serve.py``)."""
    policy = _policy(retries, initial_wait, max_wait)
    failed: list[Exception] = []

    async def attempt() -> LLMReply:
        if before_attempt is not None:
            before_attempt()
        try:
            reply = _check_text(await attempt_fn(), max_chars)
        except Exception as e:
            failed.append(e)
            raise
        reply.attempts = len(failed) + 1
        return reply

    try:
        try:
            return await attempt()  # most calls succeed at once: no retry state to build
        except Exception as e:
            if retries == 0 or not _retryable(e):
                raise
            again = _replaying(e, attempt)
        retrying = AsyncRetrying(sleep=sleep or asyncio.sleep, **policy)
        async for state in retrying:
            with state:
                return await again()
    except _FATAL as e:
        raise _stopped(e, failed) from failed[-1] if failed else None
    except Exception as e:
        raise _exhausted(e, len(failed), purpose) from e
    raise AssertionError("unreachable")  # pragma: no cover


class _Resumed:
    """The token sink of one streamed LLM call across its attempts.

    A retry streams again from the start. What it repeats of the text already sent is
    not sent again; only what goes beyond it is, so a consumer sees one answer, not the
    failed attempt's beginning followed by the whole retry. A retry that says something
    else is not forwarded (the end of the stream then sends the final answer after a
    ``reset``: see ``selfrag_core.strategies.base.stream_plan``), and text from an
    abandoned attempt (timed out, still running on its thread) is dropped.
    """

    def __init__(self, sink: TokenSink) -> None:
        self._sink = sink
        self._sent = ""
        self._attempt = 0
        self._pos = 0  # how much of the sent text the current attempt has repeated
        self._diverged = False
        self._lock = threading.Lock()

    def next_attempt(self) -> TokenSink:
        with self._lock:
            self._attempt += 1
            self._pos, self._diverged = 0, False
            attempt = self._attempt
        return lambda text: self._take(attempt, text)

    def abandon(self) -> None:
        """The current attempt failed: whatever it still sends (a timed-out call whose
        thread runs on) is dropped from now on, not only once the next attempt starts."""
        with self._lock:
            self._attempt += 1

    def _take(self, attempt: int, text: str) -> None:
        with self._lock:
            if attempt != self._attempt or self._diverged:
                return
            repeated = self._sent[self._pos : self._pos + len(text)]
            if not text.startswith(repeated):
                self._diverged = True
                return
            self._pos += len(text)
            new = text[len(repeated) :]
            if new:
                self._sent += new
                self._sink(new)


def call_llm_detailed(
    llm: object,
    prompt: str,
    retries: int = 2,
    *,
    schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    deadline: float | None = None,
    on_timeout: Callable[[Limit], Exception] = _llm_timeout,
    purpose: str = "",
    before_attempt: Hook | None = None,
    sleep: Callable[[float], None] | None = None,
    initial_wait: float = 0.5,
    max_wait: float = 8.0,
    sink: TokenSink | None = None,
    max_chars: int | None = None,
) -> LLMReply:
    """One LLM call with retries; raises LLMCallError (or BudgetExceededError).

    A reply longer than ``max_chars`` (None: no limit; the engine passes
    ``ExecutionConfig.max_reply_chars``) is cut to its first ``max_chars`` characters,
    the cut recorded in ``LLMReply.truncated_from``.

    Each attempt may take ``timeout`` seconds from its start and never runs past
    ``deadline`` (a ``time.perf_counter()`` instant); the time it waits to start (for a
    thread, for a local model's lock) counts against the deadline only
    (:class:`~selfrag_core.workers.Limit`). Past either, ``on_timeout(limit)`` is raised
    (retried when it is an ``LLMTimeoutError``). With ``sink``, the reply's text is sent to
    it as it is generated, across retries as :class:`_Resumed` says (``schema`` is not
    used then); an LLM that cannot stream sends its whole reply as one piece.
    """

    resumed = None if sink is None else _Resumed(sink)
    client = resolve_llm(llm)

    def once() -> LLMReply:
        if resumed is None:
            return to_reply(client.generate(prompt, schema))
        send = resumed.next_attempt()
        if client.streams:
            return client.stream(prompt, send)
        reply = to_reply(client.generate(prompt, None))
        send(reply.text)
        return reply

    def attempt() -> LLMReply:
        try:
            return call_within(once, timeout, on_timeout, deadline)
        except BaseException as e:
            if resumed is not None:
                resumed.abandon()
            checked = _checked(llm, e)
            if checked is e:
                raise
            raise checked from e

    return _retry_sync(attempt, retries, purpose, before_attempt, sleep, initial_wait, max_wait, max_chars)


async def acall_llm_detailed(
    llm: object,
    prompt: str,
    retries: int = 2,
    *,
    schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    deadline: float | None = None,
    on_timeout: Callable[[Limit], Exception] = _llm_timeout,
    purpose: str = "",
    before_attempt: Hook | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    initial_wait: float = 0.5,
    max_wait: float = 8.0,
    sink: TokenSink | None = None,
    max_chars: int | None = None,
) -> LLMReply:
    """Async twin of :func:`call_llm_detailed` (same policy, tenacity's async driver)."""

    resumed = None if sink is None else _Resumed(sink)
    client = resolve_llm(llm)

    async def once() -> LLMReply:
        if resumed is None:
            return to_reply(await client.agenerate(prompt, schema))
        send = resumed.next_attempt()
        if client.streams:
            return await client.astream(prompt, send)
        reply = to_reply(await client.agenerate(prompt, None))
        send(reply.text)
        return reply

    async def attempt() -> LLMReply:
        try:
            if timeout is None and deadline is None:
                return await once()
            return await awaited_within(once(), Limit(timeout, deadline), on_timeout)
        except BaseException as e:
            if resumed is not None:
                resumed.abandon()
            checked = _checked(llm, e)
            if checked is e:
                raise
            raise checked from e

    return await _retry_async(
        attempt, retries, purpose, before_attempt, sleep, initial_wait, max_wait, max_chars
    )


def _call_llm(
    llm: object,
    prompt: str,
    retries: int = 2,
    *,
    schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    sleep: Callable[[float], None] | None = None,
) -> str:
    """Call ``llm`` with ``prompt``; ``retries + 1`` attempts with exponential back-off.

    Returns the reply text. Raises :class:`LLMCallError` when every attempt failed
    (an exception, a timeout or an empty reply).
    """
    return call_llm_detailed(llm, prompt, retries, schema=schema, timeout=timeout, sleep=sleep).text


async def _acall_llm(
    llm: object,
    prompt: str,
    retries: int = 2,
    *,
    schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> str:
    """Async :func:`_call_llm`: awaits the LLM's native async API where it has one."""
    reply = await acall_llm_detailed(llm, prompt, retries, schema=schema, timeout=timeout, sleep=sleep)
    return reply.text


# ----------------------------------------------------------------------------- streaming


def _chunk_text(chunk: Any) -> str:
    if isinstance(chunk, str):
        return chunk
    delta = getattr(chunk, "delta", None)  # LlamaIndex CompletionResponse
    if isinstance(delta, str):
        return delta
    return to_reply(chunk).text if chunk is not None else ""


def _chunk_usage(chunk: Any, reply: LLMReply) -> None:
    """Token counts a streamed piece reports: an ``LLMOutput`` piece carries the call's
    totals so far (the last reported wins: providers send them in the final chunk, some
    cumulatively); LangChain's ``usage_metadata`` is per chunk (summed, as LangChain does)."""
    if isinstance(chunk, LLMOutput):
        if chunk.input_tokens is not None:
            reply.input_tokens = chunk.input_tokens
        if chunk.output_tokens is not None:
            reply.output_tokens = chunk.output_tokens
        return
    usage = getattr(chunk, "usage_metadata", None)
    if isinstance(usage, dict):
        reply.input_tokens = (reply.input_tokens or 0) + int(usage.get("input_tokens") or 0)
        reply.output_tokens = (reply.output_tokens or 0) + int(usage.get("output_tokens") or 0)
