"""RAG.query is PlainRAG on the engine: PlainRAG's prompt, a trace, an ExecutionConfig's
budget and timeouts, typed errors with their cause, the reply as written; the settings
of PlainRAGConfig that RAG.query runs with, on PlainRAG itself."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, LLMOutput, PlainRAG, PlainRAGConfig, observe_trace
from selfrag_core.errors import (
    BudgetExceededError,
    ConfigurationError,
    LLMCallError,
    LLMTimeoutError,
    RetrievalError,
)
from selfrag_core.store import RAG, HashingEmbeddings, QueryResult, SearchHit
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.types import TraceEvent

DOCS = {
    "paris": "Paris is the capital of France. The city lies on the river Seine.",
    "berlin": "Berlin is the capital of Germany and its largest city.",
    "nile": "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
}
MODES = ["sync", "async"]


def make(**kwargs: Any) -> RAG:
    rag = RAG(**kwargs)
    rag.index_many([{"text": t, "source": s} for s, t in DOCS.items()])
    return rag


async def ask(rag: RAG, mode: str, question: str, **options: Any) -> QueryResult:
    return rag.query(question, **options) if mode == "sync" else await rag.aquery(question, **options)


async def answer(strategy: PlainRAG, mode: str, question: str, context: dict[str, Any] | None = None) -> Any:
    return strategy.query(question, context) if mode == "sync" else await strategy.aquery(question, context)


def context_of(prompt: str) -> str:
    """The documents' part of a ``grounded_answer`` prompt."""
    return prompt.split("\n", 1)[1].split("\n\nQuestion:", 1)[0]


# ----------------------------------------------------------------------------- RAG.query


@pytest.mark.parametrize("mode", MODES)
async def test_query_has_a_trace_of_one_search_and_one_llm_call(mode: str) -> None:
    class Reporting:
        """An LLM that reports its token usage."""

        n_calls = 0

        def generate(self, prompt: str) -> LLMOutput:
            self.n_calls += 1
            return LLMOutput("Berlin.", input_tokens=120, output_tokens=3)

    llm = Reporting()
    rag = make(generate_fn=llm)
    seen: list[TraceEvent] = []
    with observe_trace(seen.append):
        result = await ask(rag, mode, "What is the capital of Germany?", top_k=2)
    retrieval, call = result.trace.events
    assert retrieval.kind == "retrieval" and retrieval.error is None
    searched = {k: retrieval.detail[k] for k in ("query", "top_k", "hits")}
    assert searched == {"query": "What is the capital of Germany?", "top_k": 2, "hits": 2}
    assert call.kind == "llm" and call.name == "answer" and call.attempts == 1
    assert (call.input_tokens, call.output_tokens) == (120, 3)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.attempts) == (120, 3, 1)
    assert result.trace.llm_calls == llm.n_calls == 1 and result.trace.retrievals == 1
    assert result.duration == result.trace.wall_s > 0
    assert seen == result.trace.events
    assert result.to_dict()["trace"]["input_tokens"] == 120
    assert all(isinstance(h, SearchHit) for h in result.hits) and result.sources == ["berlin", "paris"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_prompt_is_plain_rags_and_the_reply_is_returned_as_written(mode: str) -> None:
    reply = "  The answer is: Berlin is the capital of Germany.\n"
    llm, plain_llm = FakeLLM(reply), FakeLLM(reply)
    rag = make(generate_fn=llm)
    result = await ask(rag, mode, "What is the capital of Germany?", top_k=2)
    plain = await answer(
        PlainRAG(rag, plain_llm, PlainRAGConfig(top_k=2)), mode, "What is the capital of Germany?"
    )
    assert llm.prompts == plain_llm.prompts == [result.prompt]  # one prompt for a plain answer
    assert result.prompt.startswith("Answer in the question's language from these documents only")
    assert "\n[1] (source: berlin) " in result.prompt and "relevance=" not in result.prompt
    assert result.answer == reply  # unchecked, unstripped: what RAG.query has always returned
    assert plain.answer == "Berlin is the capital of Germany."  # PlainRAG's checks clean it
    with pytest.raises(ConfigurationError, match=r"prompt_template: .* placeholders"):
        await ask(rag, mode, "What?", prompt_template="{question} alone")


@pytest.mark.parametrize("mode", MODES)
async def test_filters_reach_the_search(mode: str) -> None:
    rag = make(generate_fn=FakeLLM("A river."))
    some = await ask(rag, mode, "Which river?", source=["nile", "paris"])
    assert set(some.sources) == {"nile", "paris"}
    one = await ask(rag, mode, "Which river?", metadata_filter={"source": "nile"})
    assert one.sources == ["nile"] and one.hits[0].text == DOCS["nile"]
    assert set((await ask(rag, mode, "Which capital city?")).sources) == {"paris", "berlin"}
    assert (await ask(rag, mode, "Which capital city?", source="berlin")).sources == ["berlin"]


@pytest.mark.parametrize("mode", MODES)
async def test_no_llm_call_when_nothing_is_found_and_the_llm_is_not_allowed(mode: str) -> None:
    llm = FakeLLM("unused")
    result = await ask(make(generate_fn=llm), mode, "zzzz unknown words", allow_llm_on_empty=False)
    assert not result.llm_called and llm.n_calls == 0 and result.answer == ""
    assert result.hits == [] and result.usage.attempts == 0 and result.no_answer == "no_documents"
    assert [(e.kind, e.name) for e in result.trace.events] == [
        ("retrieval", "RAG"),
        ("fallback", "not_enough_information"),
    ]
    asked = await ask(make(generate_fn=llm), mode, "zzzz unknown words")  # the specification's default
    assert asked.llm_called and llm.n_calls == 1 and asked.answer == "unused"
    assert context_of(llm.prompts[0]) == ""


@pytest.mark.parametrize("mode", MODES)
async def test_max_context_chars_bounds_the_context(mode: str) -> None:
    llm = FakeLLM("answer")
    rag = make(generate_fn=llm)
    whole = context_of((await ask(rag, mode, "capital city")).prompt)
    cut = await ask(rag, mode, "capital city", max_context_chars=130)
    assert len(whole) > 130 >= len(context_of(cut.prompt)) > 0
    assert context_of(cut.prompt).startswith("[1] (source: ") and llm.prompts[-1] == cut.prompt


@pytest.mark.parametrize("mode", MODES)
async def test_the_execution_budget_bounds_the_llm_attempts(mode: str, instant: ExecutionConfig) -> None:
    llm = FakeLLM("Berlin.", fail_on=[1, 2])
    rag = make(generate_fn=llm, execution=replace(instant, max_llm_calls=2))
    with pytest.raises(BudgetExceededError):
        await ask(rag, mode, "capital of Germany")  # two attempts fail, the budget refuses the third
    assert llm.n_calls == 2
    unbounded = make(generate_fn=FakeLLM("Berlin.", fail_on=[1, 2]), execution=instant)
    assert (await ask(unbounded, mode, "capital of Germany")).usage.attempts == 3


@pytest.mark.parametrize("mode", MODES)
async def test_the_execution_llm_timeout_applies_and_generate_timeout_overrides_it(mode: str) -> None:
    rag = make(
        generate_fn=FakeLLM("late", latency=0.3), llm_retries=0, execution=ExecutionConfig(llm_timeout=0.05)
    )
    with pytest.raises(LLMTimeoutError):
        await ask(rag, mode, "capital")
    assert (await ask(rag, mode, "capital", generate_timeout=5)).answer == "late"
    assert rag.execution.llm_timeout == 0.05  # per query only


@pytest.mark.parametrize("mode", MODES)
async def test_failures_raise_typed_errors_with_the_cause(mode: str, instant: ExecutionConfig) -> None:
    class Broken(HashingEmbeddings):
        def embed_query(self, text: str) -> Any:
            raise RuntimeError("embedder down")

        embed_queries = None  # embed_query per query

    rag = make(generate_fn=FakeLLM("unused"))
    with pytest.raises(ConfigurationError, match="metadata_filter") as bad_filter:
        await ask(rag, mode, "capital", metadata_filter="source=paris")  # a programming error: no retry
    assert isinstance(bad_filter.value.__cause__, TypeError)
    with pytest.raises(ConfigurationError, match="top_k"):
        await ask(rag, mode, "capital", top_k=0)
    with pytest.raises(RetrievalError, match="embedder down") as down:
        await ask(make(embed=Broken(), generate_fn=FakeLLM("unused")), mode, "capital")
    assert isinstance(down.value.__cause__, RuntimeError)
    failing = make(
        generate_fn=FakeLLM("unused", fail_on=[1], error=ConnectionError("no route")), llm_retries=0
    )
    with pytest.raises(LLMCallError, match="no route") as llm_down:
        await ask(failing, mode, "capital")
    assert isinstance(llm_down.value.__cause__, ConnectionError)


def test_chunks_beginning_alike_are_one_document_past_120_characters() -> None:
    """The engine merges copies of a document (the same first 120 characters, the
    specification's rule) before the answer: chunks under one long heading are answered
    from the first of them. Shorter shared openings keep every chunk."""
    short = (
        "Company handbook, chapter on travel and expenses, applies to every employee and contractor alike. "
    )
    long = short + "Revised in the spring after the annual review by the board. "
    for heading, kept in ((short, ["trains", "flights"]), (long, ["trains"])):
        rag = RAG(generate_fn=FakeLLM("ok"))
        rag.index(heading + "Trains are booked in second class.", source="trains")
        rag.index(heading + "Flights are booked in economy class.", source="flights")
        assert len(rag.search("How are trains and flights booked?")) == 2
        result = rag.query("How are trains and flights booked?")
        assert result.sources == kept and [h.source for h in result.hits] == kept
        assert ("economy class" in result.prompt) == (len(kept) == 2)


def test_execution_must_be_an_execution_config() -> None:
    with pytest.raises(TypeError, match="ExecutionConfig"):
        RAG(execution={"max_llm_calls": 1})  # type: ignore[arg-type]


def test_query_streams_nothing_but_plain_rag_over_a_rag_streams_with_filters() -> None:
    strategy = PlainRAG(make(), FakeLLM("The Nile."), PlainRAGConfig(top_k=2))
    events = list(strategy.stream("Which river?", {"filters": {"source": ["nile", "paris"]}}))
    assert "".join(e.text for e in events if e.kind == "token") == "The Nile."
    final = events[-1].result
    assert final is not None and {d.metadata["source"] for d in final.sources} == {"nile", "paris"}


# ----------------------------------------------------------------------------- PlainRAGConfig

QUESTION = "How do honeybees communicate?"
BEES = ["Honeybees communicate with the waggle dance.", "Ants leave pheromone trails."]


def test_plain_rags_defaults_are_unchanged() -> None:
    config = PlainRAGConfig()
    assert dataclasses.asdict(config) == {
        "top_k": 5,
        "llm_retries": 2,
        "max_context_chars": None,
        "allow_llm_on_empty": False,
        "check_answer": True,
        "raise_errors": False,
        "drafts": 0,  # one answer, one call (DraftsRAG's config has two)
        "verifier": None,  # the LLM-free LexicalVerifier (every strategy's config has one)
        "rules": (),  # no hand-written answer rule runs unless named (ComparisonRule is opt-in)
        "quotes": False,  # a capable model's answer is its own (for_profile(SMALL_LOCAL) weighs a quote)
    }
    assert PlainRAG(FakeRetriever(BEES), FakeLLM()).config == config


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_context_chars": -1}, "max_context_chars must be >= 0"),
        ({"max_context_chars": 1.5}, "max_context_chars must be an int"),
        ({"allow_llm_on_empty": "yes"}, "allow_llm_on_empty must be True or False"),
        ({"check_answer": 0}, "check_answer must be True or False"),
        ({"raise_errors": None}, "raise_errors must be True or False"),
    ],
)
def test_the_new_settings_are_validated(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PlainRAGConfig(**changes)


@pytest.mark.parametrize("mode", MODES)
async def test_allow_llm_on_empty_asks_the_llm_with_an_empty_context(mode: str) -> None:
    llm = FakeLLM("I cannot tell.")
    default = await answer(PlainRAG(FakeRetriever(BEES), llm), mode, "quantum lattice")
    assert default.answer == NOT_ENOUGH_ANSWER and llm.n_calls == 0
    allowed = PlainRAG(FakeRetriever(BEES), llm)
    asked = await answer(allowed, mode, "quantum lattice", {"allow_llm_on_empty": True})  # per call
    assert llm.n_calls == 1 and context_of(llm.prompts[0]) == "" and asked.sources == []
    assert asked.answer == "I cannot tell."


@pytest.mark.parametrize("mode", MODES)
async def test_max_context_chars_bounds_plain_rags_documents(mode: str) -> None:
    llm = FakeLLM("They dance.")
    strategy = PlainRAG(FakeRetriever(BEES), llm, PlainRAGConfig(max_context_chars=60))
    await answer(strategy, mode, "How do honeybees and ants communicate?")
    context = context_of(llm.prompts[0])
    assert 0 < len(context) <= 60 and "Ants" not in context and "Honeybees" in context


@pytest.mark.parametrize("mode", MODES)
async def test_check_answer_false_returns_the_reply_unchecked(mode: str) -> None:
    echo = QUESTION  # an echo of the question: the checks replace it
    checked = await answer(PlainRAG(FakeRetriever(BEES), FakeLLM(echo)), mode, QUESTION)
    assert checked.answer != echo
    raw = PlainRAG(FakeRetriever(BEES), FakeLLM(echo), PlainRAGConfig(check_answer=False))
    assert (await answer(raw, mode, QUESTION)).answer == echo


@pytest.mark.parametrize("mode", MODES)
async def test_raise_errors_raises_typed_errors_with_the_cause(mode: str) -> None:
    backend = FakeRetriever(BEES, fail=OSError("index offline"))
    fallback = await answer(PlainRAG(backend, FakeLLM()), mode, QUESTION)
    assert fallback.answer == NOT_ENOUGH_ANSWER
    assert [e.name for e in fallback.trace.fallbacks] == ["retrieval_failed", "not_enough_information"]
    with pytest.raises(RetrievalError, match="index offline") as retrieval:
        await answer(PlainRAG(backend, FakeLLM(), PlainRAGConfig(raise_errors=True)), mode, QUESTION)
    assert isinstance(retrieval.value.__cause__, OSError)

    def down() -> FakeLLM:
        return FakeLLM(fail_on=[1], error=ConnectionError("provider down"))

    fallback = await answer(
        PlainRAG(FakeRetriever(BEES), down(), PlainRAGConfig(llm_retries=0)), mode, QUESTION
    )
    assert fallback.answer == GENERATION_FAILED_ANSWER
    raising = PlainRAG(FakeRetriever(BEES), down(), PlainRAGConfig(llm_retries=0, raise_errors=True))
    with pytest.raises(LLMCallError, match="provider down") as llm:
        await answer(raising, mode, QUESTION)
    assert isinstance(llm.value.__cause__, ConnectionError)
