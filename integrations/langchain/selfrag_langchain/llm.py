"""Any LangChain model (``BaseChatModel`` or ``BaseLLM``) as selfrag's LLM."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Literal, get_args

from langchain_core.language_models import BaseLanguageModel
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig
from langchain_core.runnables.config import ensure_config, merge_configs

from selfrag_core import LLMOutput, shutting_down
from selfrag_langchain._convert import reply_output, structured_output

logger = logging.getLogger("selfrag")

StructuredMode = Literal["auto", "json_schema", "json_mode", "off"]
_MODES = get_args(StructuredMode)


class LangChainLLM:
    """Wrap a LangChain model for the strategies.

    ``LangChainLLM(model, *, structured="auto", config=None)``. ``generate`` /
    ``agenerate`` call ``model.invoke`` / ``ainvoke``; the JSON steps go through
    ``model.with_structured_output(schema, method=..., include_raw=True)``: ``"auto"``
    tries ``json_schema`` then ``json_mode``, then plain text (parsed by the core's
    tolerant parser) when the model supports neither, at binding or when the call fails
    (logged; only a method the server refused is not tried again); ``"off"`` always uses
    plain text. Token usage (``usage_metadata``) reaches ``result.trace``. An empty
    message raises ``LLMCallError`` (the core retries it as a failed attempt).

    Every step keeps the caller's generation settings: the model's own fields
    (``max_tokens``, ``temperature``, ``stop``, ...) and those bound with
    ``model.bind(max_tokens=80, stop=[...])``, which are set on the structured steps'
    copy of the model (a bound setting that is no field of the model leaves structured
    output off, logged: plain text through the binding keeps it).

    Calls are child runs of the caller's LangChain run (e.g. under ``SelfRAGRunnable``).
    ``config`` (a ``RunnableConfig``) is merged into every call's: its callbacks, tags
    and metadata are added to the run's.
    """

    def __init__(
        self, model: Any, *, structured: StructuredMode = "auto", config: RunnableConfig | None = None
    ) -> None:
        if not isinstance(model, Runnable):
            raise TypeError(
                f"model must be a LangChain chat model or LLM (a Runnable), got {type(model).__name__}"
            )
        if structured not in _MODES:
            raise ValueError(f"structured must be one of {_MODES}, got {structured!r}")
        self.model = model
        self.structured = structured
        self.config = config
        self.name = (
            getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
        )
        self._structured_model = _keeping_settings(model, self.name)
        self._runnables: dict[tuple[str, str], Runnable[Any, Any] | None] = {}
        self._refused_methods: set[str] = set()  # refused by the server: not tried again
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LangChainLLM({self.name!s}, structured={self.structured!r})"

    def _config(self) -> RunnableConfig | None:
        """``config`` merged into the run the call is made in. Given alone, its callbacks
        would replace the inherited ones, and the call would leave the caller's run."""
        return None if self.config is None else merge_configs(ensure_config(), self.config)

    def generate(self, prompt: str) -> LLMOutput:
        return reply_output(self.model.invoke(prompt, self._config()), str(self.name))

    async def agenerate(self, prompt: str) -> LLMOutput:
        return reply_output(await self.model.ainvoke(prompt, self._config()), str(self.name))

    def stream(self, prompt: str) -> Iterator[Any]:
        """The model's own stream (message chunks; the core reads their text and usage)."""
        yield from self.model.stream(prompt, self._config())

    async def astream(self, prompt: str) -> AsyncIterator[Any]:
        async for chunk in self.model.astream(prompt, self._config()):
            yield chunk

    def structured_runnable(self, schema: Mapping[str, Any]) -> Runnable[Any, Any] | None:
        """The model bound to ``schema`` by the first method it accepts, or None when it
        supports no structured output."""
        return next((bound for _, bound in self._bindings(schema)), None)

    def _bindings(self, schema: Mapping[str, Any]) -> Iterator[tuple[str, Runnable[Any, Any]]]:
        """The model bound to ``schema`` by each method to try, in order, each bound (and
        cached) only when the one before could not be used; refused methods are skipped."""
        if self.structured == "off":
            return
        key = json.dumps(schema, sort_keys=True)
        for method in ("json_schema", "json_mode") if self.structured == "auto" else (self.structured,):
            with self._lock:
                if method in self._refused_methods:
                    continue
                if (key, method) not in self._runnables:
                    self._runnables[key, method] = self._bind(dict(schema), method)
                bound = self._runnables[key, method]
            if bound is not None:
                yield method, bound

    def _bind(self, schema: dict[str, Any], method: str) -> Runnable[Any, Any] | None:
        if self._structured_model is None:
            return None
        model, config = self._structured_model
        schema.setdefault("title", "selfrag_output")
        schema.setdefault("description", "The requested JSON object.")
        try:
            bound = model.with_structured_output(schema, method=method, include_raw=True)
        except (NotImplementedError, ValueError, TypeError):
            return None
        return bound.with_config(config) if config else bound

    def _refused(self, method: str, error: Exception) -> tuple[str, str]:
        """``auto``: a server may accept the binding and refuse the request (e.g. a 400
        for ``response_format``): the next method is tried, then plain text. A refusal by
        HTTP status or ``NotImplementedError`` is remembered. Returns the trace's fallback."""
        if self.structured != "auto" or shutting_down():  # an abandoned call falls back no further
            raise error
        remembered = (
            isinstance(error, NotImplementedError) or getattr(error, "status_code", None) in _REFUSALS
        )
        if remembered:
            with self._lock:
                self._refused_methods.add(method)
        failure = f"{type(error).__name__}: {str(error)[:200]}"
        then = "not tried again" if remembered else "the next method this time"
        message = f"structured output by {method} failed on {self.name} ({failure}); {then}"
        logger.warning("selfrag fallback: %s", message)
        return "structured_output_refused", message

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        notes: list[tuple[str, str]] = []
        for method, bound in self._bindings(schema):
            try:
                return _with(structured_output(bound.invoke(prompt, self._config()), str(self.name)), notes)
            except Exception as e:
                notes.append(self._refused(method, e))
        return _with(self.generate(prompt), notes)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        notes: list[tuple[str, str]] = []
        for method, bound in self._bindings(schema):
            try:
                output = structured_output(await bound.ainvoke(prompt, self._config()), str(self.name))
                return _with(output, notes)
            except Exception as e:
                notes.append(self._refused(method, e))
        return _with(await self.agenerate(prompt), notes)


#: HTTP statuses of a refused structured-output method (remembered: not tried again)
_REFUSALS = frozenset({400, 422, 500, 501})


def _keeping_settings(model: Any, name: Any) -> tuple[BaseLanguageModel[Any], RunnableConfig] | None:
    """The model to bind a schema to, and the config to run it with, keeping what the
    caller bound: ``binding.with_structured_output`` would bind the schema to the bare
    model and drop the binding's ``max_tokens`` / ``stop`` / ``temperature``, so they are
    set on a copy of the model instead. None (plain text) for anything else."""
    if isinstance(model, BaseLanguageModel):
        return model, {}
    if not isinstance(model, RunnableBinding) or not isinstance(model.bound, BaseLanguageModel):
        return None
    unkept = [key for key in model.kwargs if key not in type(model.bound).model_fields]
    if unkept or model.config_factories:
        logger.warning(
            "selfrag fallback: structured output is off for %s: the structured steps could not keep "
            "what is bound to it (%s); its JSON steps use plain text, parsed by the core",
            name,
            ", ".join(unkept) or "config factories",
        )
        return None
    return model.bound.model_copy(update=dict(model.kwargs)), model.config


def _with(output: LLMOutput, notes: list[tuple[str, str]]) -> LLMOutput:
    """``output`` carrying the fallbacks taken to produce it (into the query's trace)."""
    return dataclasses.replace(output, fallbacks=output.fallbacks + tuple(notes)) if notes else output


def as_llm(model: Any, **kwargs: Any) -> Any:
    """``LangChainLLM(model)`` for a LangChain model; anything else is returned as is."""
    if isinstance(model, BaseLanguageModel):
        return LangChainLLM(model, **kwargs)
    return model
