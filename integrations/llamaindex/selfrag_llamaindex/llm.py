"""Any LlamaIndex LLM as the strategies' LLM."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from typing import Any

from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.types import PydanticProgramMode

from selfrag_core import LLMOutput
from selfrag_llamaindex import _events, _usage
from selfrag_llamaindex._convert import llm_output, model_from_schema, note

#: the whole prompt is the only variable, so braces in documents are never parsed
_VERBATIM = PromptTemplate("{selfrag_prompt}")


class LlamaIndexLLM:
    """``LlamaIndexLLM(llm, *, structured=None)``: a LlamaIndex ``LLM`` as a selfrag LLM.

    ``generate`` / ``agenerate`` call the LLM's public ``complete`` / ``acomplete`` with
    the final prompt string (no LlamaIndex prompt template ever formats retrieved text)
    and report the token counts the model returns; ``stream`` / ``astream`` call
    ``stream_complete`` / ``astream_complete``. LlamaIndex's own callback events and
    instrumentation spans and events for each call are therefore emitted as for any
    other caller. ``generate_structured`` uses ``structured_predict`` with a pydantic
    model built from the step's JSON schema when ``structured`` is true; ``None`` (the
    default) means "when the LLM is a function-calling model or has a non-default
    ``pydantic_program_mode``"; otherwise, or when structured prediction fails
    (logged), a plain completion whose JSON the core parses tolerantly.

    There is no fallback to ``Settings.llm``: ``llm`` is required.
    """

    def __init__(self, llm: Any, *, structured: bool | None = None) -> None:
        if llm is None:
            raise ValueError(
                "llm is required: pass a LlamaIndex LLM instance (selfrag never falls back to Settings.llm)"
            )
        if not isinstance(llm, LLM):
            raise TypeError(
                f"LlamaIndexLLM needs a llama_index.core.llms.LLM, got {type(llm).__name__}; "
                "other LLMs can be given to the strategies directly"
            )
        self.llm = llm
        if structured is None:
            structured = (
                llm.metadata.is_function_calling_model
                or llm.pydantic_program_mode is not PydanticProgramMode.DEFAULT
            )
        self.structured = bool(structured)

    def __repr__(self) -> str:
        return f"LlamaIndexLLM({type(self.llm).__name__}, structured={self.structured})"

    def generate(self, prompt: str) -> LLMOutput:
        with self._event(prompt) as ev:
            out = llm_output(self.llm.complete(prompt))
            _events.end(ev, self._end(prompt, out.text))
        return out

    async def agenerate(self, prompt: str) -> LLMOutput:
        with self._event(prompt) as ev:
            out = llm_output(await self.llm.acomplete(prompt))
            _events.end(ev, self._end(prompt, out.text))
        return out

    def stream(self, prompt: str) -> Iterator[LLMOutput]:
        """The completion's pieces as the LLM streams them (``stream_complete``): each
        chunk's ``delta``, with the token counts a chunk reports (usually the last)."""
        with self._event(prompt) as ev:
            parts: list[str] = []
            for chunk in self.llm.stream_complete(prompt):
                if piece := _piece(chunk):
                    parts.append(piece.text)
                    yield piece
            _events.end(ev, self._end(prompt, "".join(parts)))

    async def astream(self, prompt: str) -> AsyncIterator[LLMOutput]:
        with self._event(prompt) as ev:
            parts: list[str] = []
            async for chunk in await self.llm.astream_complete(prompt):
                if piece := _piece(chunk):
                    parts.append(piece.text)
                    yield piece
            _events.end(ev, self._end(prompt, "".join(parts)))

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        if self.structured:
            try:
                with self._event(prompt) as ev, _usage.counting() as usage:
                    value = self.llm.structured_predict(
                        model_from_schema(schema), _VERBATIM, selfrag_prompt=prompt
                    )
                    _events.end(ev, self._end(prompt, value.model_dump_json()))
                return usage.output(value.model_dump_json())
            except Exception as e:
                self._unstructured(e)
        return self.generate(prompt)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        if self.structured:
            try:
                with self._event(prompt) as ev, _usage.counting() as usage:
                    value = await self.llm.astructured_predict(
                        model_from_schema(schema), _VERBATIM, selfrag_prompt=prompt
                    )
                    _events.end(ev, self._end(prompt, value.model_dump_json()))
                return usage.output(value.model_dump_json())
            except Exception as e:
                self._unstructured(e)
        return await self.agenerate(prompt)

    def _unstructured(self, exc: Exception) -> None:
        """Logged, and listed in the response's ``fallbacks`` / ``adapter_notes``."""
        _events.record(
            note(
                "structured_predict_failed",
                f"structured_predict failed on {type(self.llm).__name__} ({type(exc).__name__}: {exc}); "
                "using a plain completion",
            )
        )

    def _event(self, prompt: str) -> AbstractContextManager[Any]:
        def payload() -> dict[Any, Any]:  # (an LLM's metadata is often a new pydantic object per read)
            return {EventPayload.PROMPT: prompt, EventPayload.MODEL_NAME: self.llm.metadata.model_name}

        return _events.event(CBEventType.LLM, payload, getattr(self.llm, "callback_manager", None))

    @staticmethod
    def _end(prompt: str, text: str) -> dict[str, Any]:
        return {EventPayload.PROMPT: prompt, EventPayload.COMPLETION: text}


def _piece(chunk: Any) -> LLMOutput | None:
    """A streamed chunk as its text delta with the counts it reports; None if it has neither."""
    counts = llm_output(chunk)
    delta = chunk.delta or ""
    if not delta and counts.input_tokens is None and counts.output_tokens is None:
        return None
    return LLMOutput(delta, counts.input_tokens, counts.output_tokens)
