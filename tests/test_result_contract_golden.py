"""The result contract's safety net: for a fixed set of scripted runs of every strategy
(and ``RAG.query``), sync, async and streamed, the prompts sent and ``to_dict()`` are
those recorded in ``tests/golden/result_contract.json`` (times left out; parallel calls
and events compared in a stable order). Regenerate after a deliberate change with
``python tests/test_result_contract_golden.py --write`` and say what changed."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import (
    AdaptiveRAG,
    Answer,
    ExecutionConfig,
    HyDERAG,
    PlainRAG,
    RecursiveRAG,
    RecursiveRAGConfig,
    SelfHealingRAG,
    SelfIRAG,
    SelfRAGConfig,
    Strategy,
    StrategyError,
)
from selfrag_core.engine import Generate, Plan, Retrieve
from selfrag_core.store import RAG
from selfrag_core.strategies.base import format_context
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document, judge_json

GOLDEN = Path(__file__).parent / "golden" / "result_contract.json"
DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
    "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
]
#: keys whose values are times: never the same twice
TIMES = {"wall_s", "start_s", "latency_s", "duration"}


def oracle(prompt: str) -> str:
    """A scripted model that answers every prompt of every strategy from its context."""
    if '"items"' in prompt and "SUBQUESTIONS" in prompt:
        if "compare" in prompt:
            return json.dumps(
                {"items": ["What is the capital of France?", "What is the capital of Germany?"]}
            )
        return json.dumps({"items": []})
    if "factual claims" in prompt:
        supported = "Seine" in prompt or "Berlin" in prompt
        return json.dumps({"claims": [{"claim": "the answer", "supported": supported}]})
    if "then judge your own answer" in prompt:
        return judge_json(first_document(prompt, "Not in the context."), 8, issues=["short"])
    if "Judge the answer" in prompt or "Reply with one JSON object" in prompt:
        return judge_json(None, 6, issues=["too short"], suggestions=["Seine"])
    if "Improve the answer" in prompt:
        return "Paris is the capital of France. The city lies on the river Seine."
    if "Write a passage" in prompt:
        return "The capital city of a country is where its government sits."
    if "Combine the answers" in prompt:
        return "Paris is the capital of France. Berlin is the capital of Germany and its largest city."
    return first_document(prompt, "Not in the context.")


def instant(**options: Any) -> ExecutionConfig:
    async def no_wait(_: float) -> None:
        return None

    return ExecutionConfig(sleep=lambda _: None, async_sleep=no_wait, **options)


class Corrective(Strategy[Answer]):
    """A strategy of one's own: one retrieval, one answer, details."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        docs = yield Retrieve(self.rag_system, query, 2)
        reply = yield Generate(self.llm, f"{format_context(docs)}\nQ: {query}", "answer")
        return Answer(reply.text.strip(), docs, {"kept": len(docs)})


def _rag(llm: FakeLLM) -> RAG:
    rag = RAG(generate_fn=llm, execution=instant(llm_timeout=None, retrieval_timeout=None))
    rag.index_many([{"text": t, "source": f"doc{i}.md"} for i, t in enumerate(DOCS)])
    return rag


#: name -> (question, factory(llm) -> strategy); a factory may return a RAG (``RAG.query``)
Factory = Callable[[FakeLLM], Any]
SCENARIOS: dict[str, tuple[str, Factory]] = {
    "plain": ("What is the capital of France?", lambda llm: PlainRAG(FakeRetriever(DOCS), llm)),
    "plain_no_documents": ("zebra quantum lattice?", lambda llm: PlainRAG(FakeRetriever(DOCS), llm)),
    "plain_llm_down": (
        "What is the capital of France?",
        lambda llm: PlainRAG(FakeRetriever(DOCS), llm, execution=instant()),
    ),
    "self_fast": ("What is the capital of France?", lambda llm: SelfIRAG(FakeRetriever(DOCS), llm)),
    "self_two_step": (
        "What river runs through Paris?",
        lambda llm: SelfIRAG(
            FakeRetriever(DOCS), llm, SelfRAGConfig(fast_mode=False, max_refinement_iterations=2)
        ),
    ),
    "hyde": ("What is the capital of Germany?", lambda llm: HyDERAG(FakeRetriever(DOCS), llm)),
    "recursive_decomposed": (
        "What are the causes and effects of the capital of France, and how do they compare to Berlin?",
        lambda llm: RecursiveRAG(FakeRetriever(DOCS), llm, RecursiveRAGConfig()),
    ),
    "recursive_direct": (
        "What is the longest river in Africa?",
        lambda llm: RecursiveRAG(FakeRetriever(DOCS), llm, RecursiveRAGConfig()),
    ),
    "healing_passes": (
        "What river runs through Paris?",
        lambda llm: SelfHealingRAG(llm, [FakeRetriever(DOCS)]),
    ),
    "healing_fails": (
        "What does photosynthesis store?",
        lambda llm: SelfHealingRAG(llm, [FakeRetriever(DOCS[:1]), FakeRetriever(DOCS[1:2])]),
    ),
    "adaptive": ("What is the capital of France?", lambda llm: AdaptiveRAG(FakeRetriever(DOCS), llm)),
    "custom": ("What is the capital of France?", lambda llm: Corrective(FakeRetriever(DOCS), llm)),
    "rag_query": ("What is the capital of Germany?", _rag),
}
MODES = ("sync", "async", "stream")
#: the scenarios whose model fails every call
DOWN = {"plain_llm_down"}


def normalised(value: Any) -> Any:
    """``value`` without times, its trace events in a stable order."""
    if isinstance(value, dict):
        out = {k: normalised(v) for k, v in value.items() if k not in TIMES}
        if isinstance(out.get("events"), list):
            out["events"] = sorted(out["events"], key=lambda e: json.dumps(e, sort_keys=True))
        return out
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def _finished(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except StrategyError as e:  # SelfHealingRAG: every attempt failed, its report says how
        assert e.report is not None
        return e.report


async def _afinished(run: Callable[[], Any]) -> Any:
    try:
        return await run()
    except StrategyError as e:
        assert e.report is not None
        return e.report


async def record(name: str, mode: str) -> dict[str, Any]:
    """One scripted run: the prompts sent, ``to_dict()`` and, streamed, the events' kinds."""
    question, factory = SCENARIOS[name]
    llm = FakeLLM(oracle, fail_on=range(1, 9) if name in DOWN else ())
    target = factory(llm)
    if isinstance(target, RAG):
        if mode == "stream":
            pytest.skip("RAG.query does not stream")
        result = target.query(question) if mode == "sync" else await target.aquery(question)
        out: dict[str, Any] = {"to_dict": result.to_dict()}
    elif mode == "sync":
        out = {"to_dict": _finished(lambda: target.query(question)).to_dict()}
    elif mode == "async":
        out = {"to_dict": (await _afinished(lambda: target.aquery(question))).to_dict()}
    else:
        events = []
        try:
            events = list(target.stream(question))
            result = events[-1].result
        except StrategyError as e:
            result = e.report
        out = {"to_dict": result.to_dict()}
        steps = sorted(e.step.kind for e in events if e.step is not None)  # parallel steps interleave
        out["stream"] = {"steps": steps, "others": [e.kind for e in events if e.kind != "step"]}
    out["prompts"] = sorted(llm.prompts)
    return normalised(out)


def expected() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_prompts_and_to_dict_are_as_recorded(name: str, mode: str) -> None:
    runs = expected()[name]
    golden = runs.get(mode, runs["sync"])  # a mode that runs as sync does is recorded once
    got = await record(name, mode)
    assert got["prompts"] == golden["prompts"]
    assert got["to_dict"] == golden["to_dict"]
    assert got.get("stream") == golden.get("stream")


def write() -> None:
    async def every() -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name in SCENARIOS:
            runs = {"sync": await record(name, "sync")}
            for mode in MODES[1:]:
                if mode == "stream" and name == "rag_query":
                    continue
                run = await record(name, mode)
                if run != runs["sync"]:
                    runs[mode] = run
            data[name] = runs
        return data

    GOLDEN.parent.mkdir(exist_ok=True)
    data = asyncio.run(every())
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__" and "--write" in sys.argv:
    write()
