"""``OpenAICompatibleLLM``: any OpenAI-compatible chat-completions server, through the
official ``openai`` client (``pip install 'selfrag[openai]'``, imported lazily).

The JSON steps ask for structured output, by the first method the server takes:

1. ``json_schema``: ``response_format={"type": "json_schema", ...}`` (OpenAI's structured
   outputs);
2. ``tools``: function calling, one function whose parameters are the schema, forced by
   ``tool_choice`` (the reply is the call's arguments);
3. ``json_object_schema``: ``response_format={"type": "json_object", "schema": ...}``
   (llama.cpp's and llama-cpp-python's JSON mode constrained by a schema);
4. ``json_object``: plain JSON mode;
5. ``text``: no constraint; the library's tolerant parser reads the reply.

The first structured call probes them in this order: a method the server refuses (HTTP
400, 422, 500, 501 or a reply without content) is skipped, logged and kept in
:attr:`OpenAICompatibleLLM.structured_fallbacks`; the first one that answers is used by
every later call of this object (llama.cpp's server answers ``json_schema`` with HTTP
500, which the library would otherwise retry on every JSON step). A probe that no method
survives (the server is down) settles nothing: the library retries, and probes again.

Errors: rejected credentials (401/403), an unknown model or URL (404) and a refused
request (400/422) raise :class:`~selfrag_core.errors.ConfigurationError` (fatal, no
retry); timeouts, connection errors, rate limits and 5xx are raised as the client's own
exceptions, which the library retries with its policy (the client's retries are off);
a 429 or 503 reply's ``Retry-After`` sets the wait before the retry (at most 30 s, never
past the query's deadline: see :func:`selfrag_core.llm.retry_after`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from selfrag_core.errors import ConfigurationError, MissingDependencyError
from selfrag_core.protocols import LLMOutput
from selfrag_core.workers import blocking, unsuspended

logger = logging.getLogger("selfrag")

INSTALL_HINT = "pip install 'selfrag[openai]'"

#: the structured-output methods, in the order the probe tries them
STRUCTURED_METHODS = ("json_schema", "tools", "json_object_schema", "json_object", "text")
#: the name of the schema / function sent to the server
_FUNCTION = "reply"
#: the key the client needs when the server takes any (llama.cpp, vLLM, Ollama, ...)
_PLACEHOLDER_KEY = "not-needed"
#: statuses of a refused structured-output method (the probe moves on to the next one)
_REFUSED = frozenset({400, 422, 500, 501})


@dataclass(frozen=True)
class StructuredFallback:
    """A structured-output method the server refused, and the one used instead."""

    method: str
    error: str
    used: str

    def to_dict(self) -> dict[str, str]:
        return {"method": self.method, "error": self.error, "used": self.used}


class _Unusable(Exception):
    """A structured reply without content (e.g. no tool call): the method does not work."""


def _require_openai() -> Any:
    try:
        import openai  # type: ignore[import-not-found,unused-ignore]
    except ImportError as e:
        raise MissingDependencyError(f"OpenAICompatibleLLM needs the openai package: {INSTALL_HINT}") from e
    return openai


def _check_settings(
    model: Any, max_tokens: int | None, temperature: float | None, timeout: float, structured_methods: Any
) -> None:
    """Raise early on a setting :class:`OpenAICompatibleLLM` cannot use: no model name
    (ConfigurationError), or a cap, temperature, timeout or list of methods out of range
    (ValueError)."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigurationError("OpenAICompatibleLLM needs a model name, e.g. model='gpt-4o-mini'")
    if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
        raise ValueError(f"max_tokens must be None or >= 1, got {max_tokens!r}")
    if temperature is not None and temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    unknown = [m for m in structured_methods if m not in STRUCTURED_METHODS]
    if unknown or not structured_methods:
        raise ValueError(
            f"structured_methods must be a non-empty tuple of {STRUCTURED_METHODS}, "
            f"got {structured_methods!r}"
        )


class OpenAICompatibleLLM:
    """An LLM served by an OpenAI-compatible chat-completions API (OpenAI, llama.cpp's
    server, llama-cpp-python's server, vLLM, Ollama, ...), with the core's protocols:
    ``generate`` / ``agenerate``, ``generate_structured`` / ``agenerate_structured``,
    ``stream`` / ``astream``; every reply is an ``LLMOutput`` with the server's token
    counts.

    ``model``: the model name the server knows. ``base_url``: the API root (e.g.
    ``http://127.0.0.1:8080/v1``); None reads ``OPENAI_BASE_URL``, else OpenAI's.
    ``api_key``: None reads ``OPENAI_API_KEY``; with neither, a server at a ``base_url``
    gets a placeholder key (local servers take any), OpenAI's raises ConfigurationError.
    ``max_tokens`` caps each reply (sent as ``max_tokens``, which llama.cpp reads; it
    ignores ``max_completion_tokens``); ``temperature`` / ``seed``: sampling (None: the
    server's default). ``structured_methods``: the methods the JSON steps may use, in
    order (see the module docstring); ``("text",)`` turns structured output off.
    ``timeout``: the client's HTTP timeout in seconds (the library's ``llm_timeout``
    applies on top). ``client`` / ``async_client``: ready-made ``openai.OpenAI`` /
    ``openai.AsyncOpenAI`` clients to use instead (their settings win: give them
    ``max_retries=0``, or the client's retries multiply the library's).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int | None = 512,
        temperature: float | None = 0.0,
        seed: int | None = None,
        system_prompt: str | None = None,
        structured_methods: tuple[str, ...] = STRUCTURED_METHODS,
        timeout: float = 120.0,
        client: Any = None,
        async_client: Any = None,
    ) -> None:
        _check_settings(model, max_tokens, temperature, timeout, structured_methods)
        _require_openai()
        self.model = model.strip()
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").strip() or None
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key and client is None and async_client is None:
            if self.base_url is None:
                raise ConfigurationError(
                    "OpenAICompatibleLLM: no API key; set OPENAI_API_KEY or pass api_key=, or give the "
                    "base_url of a compatible server (OPENAI_BASE_URL)",
                    component="LLM",
                )
            key = _PLACEHOLDER_KEY
        self._api_key = key
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.system_prompt = system_prompt
        self.structured_methods = tuple(structured_methods)
        self.timeout = timeout
        #: every structured-output method the server refused, with the one used instead
        self.structured_fallbacks: list[StructuredFallback] = []
        self._method: str | None = None  # the structured method settled by the probe
        self._stream_usage = True  # whether the server takes stream_options
        self._client = client
        self._fixed_async_client = async_client
        #: per event loop: its ``AsyncOpenAI`` (the connection pool belongs to the loop) and probe lock
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()  # guards the lazily built clients and locks
        self._probe_lock = threading.Lock()  # one sync probe at a time

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM({self.model!r}, base_url={self.base_url!r})"

    @property
    def where(self) -> str:
        """The model and its server, for a reader: ``model 'qwen' at http://localhost:8080/v1``."""
        return f"model {self.model!r} at {self.base_url or 'api.openai.com'}"

    @property
    def structured_method(self) -> str | None:
        """The structured-output method the probe settled on (None before the first JSON step)."""
        return self._method

    @property
    def cache_identity(self) -> dict[str, Any]:
        """What decides the replies, as JSON (the key of :class:`selfrag_core.replay.CachedLLM`):
        the model and the server's host, and the generation settings."""
        host = urlsplit(self.base_url).netloc if self.base_url else "api.openai.com"
        return {
            "model": f"openai:{self.model}@{host}",
            "max_tokens": self.max_tokens,
            "temperature": None if self.temperature is None else float(self.temperature),
            "seed": self.seed,
            "system_prompt": self.system_prompt,
        }

    # ------------------------------------------------------------------ clients
    def _client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"api_key": self._api_key, "max_retries": 0, "timeout": self.timeout}
        if self.base_url is not None:
            options["base_url"] = self.base_url
        return options

    def _sync_client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = _build(lambda openai: openai.OpenAI(**self._client_options()))
        return self._client

    def _on_loop(self) -> tuple[Any, asyncio.Lock]:
        """The running event loop's async client and probe lock."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if loop not in self._loops:
                client = self._fixed_async_client
                if client is None:
                    client = _build(lambda openai: openai.AsyncOpenAI(**self._client_options()))
                self._loops[loop] = (client, asyncio.Lock())
            return self._loops[loop]

    # ------------------------------------------------------------------ requests
    def _request(
        self, prompt: str, method: str | None = None, schema: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        sampling = {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}
        request.update((name, value) for name, value in sampling.items() if value is not None)
        if method == "json_schema":
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": _FUNCTION, "schema": schema},
            }
        elif method == "tools":
            function = {"name": _FUNCTION, "description": "Give the reply.", "parameters": schema}
            request["tools"] = [{"type": "function", "function": function}]
            request["tool_choice"] = {"type": "function", "function": {"name": _FUNCTION}}
        elif method == "json_object_schema":
            request["response_format"] = {"type": "json_object", "schema": schema}
        elif method == "json_object":
            request["response_format"] = {"type": "json_object"}
        return request

    def _stream_request(self, prompt: str) -> dict[str, Any]:
        request = self._request(prompt)
        request["stream"] = True
        if self._stream_usage:
            request["stream_options"] = {"include_usage": True}
        return request

    # ------------------------------------------------------------------ protocols
    def generate(self, prompt: str) -> LLMOutput:
        client = self._sync_client()
        with self._translating():
            response = client.chat.completions.create(**self._request(prompt))
        return _output(response, None)

    async def agenerate(self, prompt: str) -> LLMOutput:
        client, _ = self._on_loop()
        with self._translating():
            response = await client.chat.completions.create(**self._request(prompt))
        return _output(response, None)

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        """JSON text for ``schema``, by the method the probe settled on (see the module docstring)."""
        create = blocking(self._sync_client().chat.completions.create)
        if self._method is None:
            with self._probe_lock:
                return unsuspended(self._structured(prompt, schema, create))
        return unsuspended(self._structured(prompt, schema, create))

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        client, probe_lock = self._on_loop()
        if self._method is None:
            async with probe_lock:
                return await self._structured(prompt, schema, client.chat.completions.create)
        return await self._structured(prompt, schema, client.chat.completions.create)

    def stream(self, prompt: str) -> Iterator[str | LLMOutput]:
        """The reply piece by piece; a last ``LLMOutput("")`` carries the token counts."""
        chunks = unsuspended(self._open_stream(prompt, blocking(self._sync_client().chat.completions.create)))
        with self._translating():
            for chunk in chunks:
                yield from _pieces(chunk)

    async def astream(self, prompt: str) -> AsyncIterator[str | LLMOutput]:
        client, _ = self._on_loop()
        chunks = await self._open_stream(prompt, client.chat.completions.create)
        with self._translating():
            async for chunk in chunks:
                for piece in _pieces(chunk):
                    yield piece

    async def aping(self) -> None:
        """Check that the server answers, without generating: one models-list request
        (``GET /models``). Raises as a call would (ConfigurationError for rejected
        credentials or a wrong URL). The HTTP service's /readyz uses it."""
        client, _ = self._on_loop()
        with self._translating():
            await client.models.list()

    # ------------------------------------------------------------------ internals
    # The sync and the async paths share these coroutines: ``create`` sends a request
    # (``chat.completions.create``), blocking on the sync path (see ``unsuspended``).
    @contextlib.contextmanager
    def _translating(self) -> Iterator[None]:
        """Raise an error of the client as :func:`_translated` says."""
        try:
            yield
        except Exception as e:
            raise _translated(e, self) from e

    async def _open_stream(self, prompt: str, create: Callable[..., Awaitable[Any]]) -> Any:
        """The chunks of a streamed reply (without token counts from a server that refuses
        ``stream_options``)."""
        with self._translating():
            try:
                return await create(**self._stream_request(prompt))
            except Exception as e:
                if not (self._stream_usage and _status(e) in (400, 422)):
                    raise
                self._stream_usage = False
                logger.warning(
                    "%s: the server refused stream_options (%s); streaming without token counts",
                    self.where,
                    _brief(e),
                )
            return await create(**self._stream_request(prompt))

    async def _structured(
        self, prompt: str, schema: dict[str, Any], create: Callable[..., Awaitable[Any]]
    ) -> LLMOutput:
        """The method settled on, else the probe (under the probe lock): every method in
        order until one answers; a refused one is skipped while another is left to try."""
        settled = self._method
        if settled is not None:
            with self._translating():
                response = await create(**self._request(prompt, settled, schema))
            return _structured_output(response, settled, strict=False)
        refused: list[tuple[str, Exception]] = []
        for method in self.structured_methods:
            try:
                response = await create(**self._request(prompt, method, schema))
                output = _structured_output(response, method, strict=method != "text")
            except Exception as e:
                if not _refused(e) or method == self.structured_methods[-1]:
                    raise _translated(e, self) from e
                refused.append((method, e))
                continue
            return self._settle(method, refused, output)
        raise AssertionError("unreachable")  # pragma: no cover

    def _settle(self, method: str, refused: list[tuple[str, Exception]], output: LLMOutput) -> LLMOutput:
        """Remember ``method`` for this server; the probe's reply carries each refused
        method as a fallback (``structured_output_refused``), so the query's trace shows it."""
        notes = []
        for failed, error in refused:
            fallback = StructuredFallback(failed, _brief(error), method)
            self.structured_fallbacks.append(fallback)
            message = (
                f"structured output by {failed} failed ({fallback.error}); "
                f"using {method} for this server from now on"
            )
            logger.warning("%s: %s", self.where, message)
            notes.append(("structured_output_refused", message))
        self._method = method
        return dataclasses.replace(output, fallbacks=output.fallbacks + tuple(notes))


def _build(make: Any) -> Any:
    openai = _require_openai()
    try:
        return make(openai)
    except openai.OpenAIError as e:  # missing credentials and other refused settings
        raise ConfigurationError(f"the openai client refused its settings: {e}", component="LLM") from e


def _status(exc: BaseException) -> int | None:
    value = getattr(exc, "status_code", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _refused(exc: Exception) -> bool:
    """Whether ``exc`` says the server does not take a structured-output method."""
    return isinstance(exc, _Unusable) or _status(exc) in _REFUSED


def _brief(exc: BaseException) -> str:
    """``exc`` on one line for a reader: ``HTTP 500: <the server's own message>``."""
    status = _status(exc)
    text = " ".join((_server_message(exc) or str(getattr(exc, "message", None) or exc)).split())
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"HTTP {status}: {text}" if status is not None else f"{type(exc).__name__}: {text}"


def _server_message(exc: BaseException) -> str | None:
    """The message of an error reply's body (``{"error": {"message": ...}}``, ``{"detail":
    ...}``, FastAPI's list of ``msg``), unwrapped when it is JSON text itself; None when the
    body holds none. The client's own text is the body's Python repr, escapes and all."""
    body: Any = getattr(exc, "body", None)
    for _ in range(4):  # a proxy may wrap the server's JSON reply in its own message
        if isinstance(body, str):
            try:
                body = json.loads(body)
            except ValueError:
                return body.strip() or None
            continue
        if isinstance(body, list):
            parts = [str(item.get("msg")) for item in body if isinstance(item, dict) and item.get("msg")]
            return "; ".join(parts) or None
        if not isinstance(body, dict):
            return None
        inner = body.get("error") or body  # {"error": {...}}, {"error": "text"} or the body itself
        if isinstance(inner, dict):
            inner = next((inner[k] for k in ("message", "detail", "msg") if inner.get(k)), None)
        body = inner
    return None


def _translated(exc: Exception, llm: OpenAICompatibleLLM) -> Exception:
    """``exc`` as the library should see it: a ConfigurationError for what no retry mends,
    else the client's exception itself (a transient fault: the library retries)."""
    if isinstance(exc, _Unusable):
        return ValueError(str(exc))  # an empty reply: retried like one
    status = _status(exc)
    where = llm.where
    if status in (401, 403):
        fix = "check the API key (api_key= or OPENAI_API_KEY) and its permissions"
    elif status == 404:
        fix = "check the model name and the base URL (it usually ends in /v1)"
    elif status in (400, 422):
        fix = "the server refused the request: check the model, max_tokens and the server's context size"
    else:
        return exc
    return ConfigurationError(
        f"the OpenAI-compatible server refused the {where} ({_brief(exc)}): {fix}", component="LLM"
    )


def _usage(response: Any) -> tuple[int | None, int | None]:
    usage = getattr(response, "usage", None)
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)


def _message(response: Any) -> Any:
    choices = getattr(response, "choices", None) or []
    return choices[0].message if choices else None


def _output(response: Any, text: str | None) -> LLMOutput:
    if text is None:
        text = getattr(_message(response), "content", None) or ""
    return LLMOutput(text.strip(), *_usage(response))


def _structured_output(response: Any, method: str, *, strict: bool) -> LLMOutput:
    """The JSON text of a structured reply; with ``strict`` (probing), a reply without
    content raises ``_Unusable`` so that the probe moves on."""
    message = _message(response)
    calls = (getattr(message, "tool_calls", None) or []) if method == "tools" else []
    text = (getattr(calls[0].function, "arguments", "") or "") if calls else ""
    if not text.strip():
        text = getattr(message, "content", None) or ""
    if strict and not text.strip():
        raise _Unusable(f"the server answered {method} without content")
    return _output(response, text)


def _pieces(chunk: Any) -> Iterator[str | LLMOutput]:
    for choice in getattr(chunk, "choices", None) or []:
        content = getattr(getattr(choice, "delta", None), "content", None)
        if content:
            yield content
    if getattr(chunk, "usage", None) is not None:
        yield LLMOutput("", *_usage(chunk))
