"""A selfrag strategy as an LCEL runnable."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Union

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import AddableDict
from pydantic import ConfigDict, field_validator

from selfrag_core import arun_query, check_strategy, run_query
from selfrag_langchain._convert import question_of, result_output

Input = Union[str, dict[str, Any]]
Output = dict[str, Any]

#: the name of the custom event of each step of a streamed query (``astream_events``: ``on_custom_event``)
STEP_EVENT = "selfrag_step"


class SelfRAGRunnable(RunnableSerializable[Input, Output]):
    """Any selfrag strategy as a runnable: ``SelfRAGRunnable(strategy=SelfIRAG(...))``.

    Input: the question as a string, or a dict with ``question`` (also ``query`` /
    ``input``) and an optional ``context`` dict (e.g. ``metadata_filter``); anything else
    raises ``TypeError`` / ``ValueError``. Output: a dict with ``answer``, ``no_answer``
    (None, or why there is no answer: ``"generation_failed"``, ``"no_documents"``, ...),
    ``sources`` (``Document``s with ``score`` / ``score_kind`` metadata), ``confidence``,
    ``trace``, ``strategy``, ``question`` and ``details`` (the rest of the result).
    Backend and LLM failures never raise: the strategy's fallback answer comes back with
    ``no_answer`` saying why, and ``trace["fallbacks"]`` / ``trace["events"]`` say what
    failed (``SelfHealingRAG`` raises ``StrategyError`` only when every attempt raised).

    The strategy's LangChain model calls and retrievals run as child runs of this
    runnable's run. ``batch`` / ``abatch`` honour ``max_concurrency``. ``stream`` /
    ``astream`` yield ``{"answer": token}`` chunks as the strategy's final answer is
    generated (HyDE, recursive merge: token by token when the model streams; SelfIRAG
    picks its answer only after evaluating it, so it arrives as one chunk), then one
    chunk with every other key; the chunks add up to the ``invoke`` output. While they
    stream, each step of the query (a retrieval, a hypothetical passage, a sub-question,
    a verdict, an attempt, a fallback: ``selfrag_core.Step``) is dispatched as a custom
    event named ``selfrag_step`` with the step's ``to_dict()`` as its data, as it happens:
    ``astream_events`` yields it as an ``on_custom_event``, callback handlers get
    ``on_custom_event``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    strategy: Any

    _check = field_validator("strategy")(lambda cls, v: check_strategy(v))

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return super().get_name(suffix, name=name or f"SelfRAG[{type(self.strategy).__name__}]")

    def _run(self, value: Input) -> Output:
        question, context = question_of(value)
        return result_output(run_query(self.strategy, question, context), question)

    async def _arun(self, value: Input) -> Output:
        question, context = question_of(value)
        return result_output(await arun_query(self.strategy, question, context), question)

    def _chunks(
        self, inputs: Iterator[Input], run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> Iterator[Output]:
        for value in inputs:
            question, context = question_of(value)
            for event in self.strategy.stream(question, context):
                if event.kind == "step":
                    dispatch_custom_event(STEP_EVENT, event.step.to_dict(), config=config)
                else:
                    yield _chunk(event, question)

    async def _achunks(
        self,
        inputs: AsyncIterator[Input],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[Output]:
        async for value in inputs:
            question, context = question_of(value)
            async for event in self.strategy.astream(question, context):
                if event.kind == "step":
                    await adispatch_custom_event(STEP_EVENT, event.step.to_dict(), config=config)
                else:
                    yield _chunk(event, question)

    def stream(self, input: Input, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Output]:
        yield from self._transform_stream_with_config(iter([input]), self._chunks, config, **kwargs)

    async def astream(
        self, input: Input, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Output]:
        async def one() -> AsyncIterator[Input]:
            yield input

        async for chunk in self._atransform_stream_with_config(one(), self._achunks, config, **kwargs):
            yield chunk

    def invoke(self, input: Input, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        return self._call_with_config(self._run, input, config, **kwargs)

    async def ainvoke(self, input: Input, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        return await self._acall_with_config(self._arun, input, config, **kwargs)


def _chunk(event: Any, question: str) -> Output:
    """A stream event as an output chunk: answer tokens, then everything else. Chunks
    add up, so a reset (the text so far was not the answer: see ``StreamEvent``) cannot
    take text back: it adds a blank line, after which the answer comes in full, and
    ``stream_restarted: True``."""
    if event.kind == "token":
        return AddableDict(answer=event.text)
    if event.kind == "reset":
        return AddableDict(answer="\n\n", stream_restarted=True)
    rest = result_output(event.result, question)
    del rest["answer"]
    return AddableDict(rest)
