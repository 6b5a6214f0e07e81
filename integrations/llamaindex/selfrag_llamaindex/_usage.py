"""Token counts of ``structured_predict``, which returns only the parsed object.

The LLM calls it makes (a completion, or a chat with tools) end with LlamaIndex
instrumentation events that carry the responses, usage included. One event handler,
added to LlamaIndex's root dispatcher on first use, adds them up for the structured
call running in the current context (a ``ContextVar``, so concurrent calls each count
their own); outside such a call it does nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMCompletionEndEvent

from selfrag_core import LLMOutput
from selfrag_llamaindex._convert import llm_output


class Usage:
    """The token counts reported by the LLM calls of one structured call."""

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self._counted: list[Any] = []  # the raw replies counted (kept alive: compared by identity)

    def add(self, response: Any) -> None:
        """Add ``response``'s counts, once per raw reply: a ``CustomLLM``'s ``chat`` wraps
        its ``complete``, and both end with an event carrying the same raw reply."""
        raw = getattr(response, "raw", None)
        if raw is not None:
            if any(raw is seen for seen in self._counted):
                return
            self._counted.append(raw)
        counts = llm_output(response)
        if counts.input_tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + counts.input_tokens
        if counts.output_tokens is not None:
            self.output_tokens = (self.output_tokens or 0) + counts.output_tokens

    def output(self, text: str) -> LLMOutput:
        return LLMOutput(text, self.input_tokens, self.output_tokens)


_COUNTING: ContextVar[Usage | None] = ContextVar("selfrag_llamaindex_usage", default=None)


class UsageHandler(BaseEventHandler):
    @classmethod
    def class_name(cls) -> str:
        return "SelfragStructuredUsage"

    def handle(self, event: Any, **kwargs: Any) -> None:
        usage = _COUNTING.get()
        ended = isinstance(event, (LLMCompletionEndEvent, LLMChatEndEvent))
        if usage is not None and ended and event.response is not None:
            usage.add(event.response)


_installed = False
_lock = threading.Lock()


def _install() -> None:
    global _installed
    with _lock:
        if not _installed:
            instrument.get_dispatcher().add_event_handler(UsageHandler())  # type: ignore[attr-defined]
            _installed = True


@contextlib.contextmanager
def counting() -> Iterator[Usage]:
    """Count the tokens of the LLM calls made inside the block (in this context)."""
    _install()
    usage = Usage()
    token = _COUNTING.set(usage)
    try:
        yield usage
    finally:
        _COUNTING.reset(token)
