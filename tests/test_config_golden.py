"""Golden runs: every strategy, built through ``presets.build_strategy``, through its
constructor and served with per-request options, answers a fixed set of scripted
questions with the same prompts, answers and sources as when the fixture was recorded.

It guards the configuration work (one config style, issue 31): a refactor of how a
strategy is configured must not change what it sends or answers. Only stable fields are
compared (the prompts, the answer, the sources' ids and texts, the specification's
result fields), never timings or the whole ``to_dict()``.

Regenerate the fixture (only when a change of behaviour is intended, e.g. a prompt
template changed) with ``SELFRAG_GOLDEN_REGENERATE=1 pytest tests/test_config_golden.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import presets
from selfrag_core.config import RecursiveRAGConfig, SelfRAGConfig
from selfrag_core.strategies import (
    AdaptiveRAG,
    HyDERAG,
    PlainRAG,
    RecursiveRAG,
    SelfHealingRAG,
    SelfIRAG,
)
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document, judge_json

FIXTURE = Path(__file__).parent / "golden" / "config_golden.json"
REGENERATE = os.environ.get("SELFRAG_GOLDEN_REGENERATE") == "1"

DOCUMENTS = [
    "Honeybees dance to show other bees the way to flowers. The waggle dance encodes direction.",
    "Bees swarm when a colony grows too large and a new queen is raised in the hive.",
    "Ada Lovelace was born in 1815 in London and wrote about the Analytical Engine.",
    "Grace Hopper was born in 1906 in New York and worked on the first compilers.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in leaves.",
    "The river Nile flows north through Egypt into the Mediterranean Sea.",
]
QUESTIONS = {
    "simple": "Why do honeybees dance?",
    "parts": "Why do honeybees dance and why do bees swarm?",
    "complex": "How does the waggle dance encode direction and why do bees swarm when colonies grow?",
    "compare": "Who was born first, Ada Lovelace or Grace Hopper?",
    "nothing": "Qwertz zxcvb?",
}


def _judge(prompt: str) -> str:
    """Scores that refine an answer once: low for an answer without 'dance', high otherwise."""
    answer = prompt.rsplit("Answer:", 1)[-1] if "Answer:" in prompt else prompt
    return judge_json(score=9 if "dance" in answer.lower() else 5, issues=["too short"])


def script(prompt: str) -> str:
    """A deterministic LLM: its reply depends on the prompt's kind and documents only."""
    if prompt.startswith("SUBQUESTIONS"):
        question = re.search(r"Question: (.*)", prompt)
        text = question.group(1) if question else ""
        halves = [h.strip(" ?") + "?" for h in re.split(r"\band\b", text) if h.strip(" ?")]
        return json.dumps({"items": halves[:2]})
    if prompt.startswith("Write a passage"):
        question = re.search(r"Question: (.*)", prompt)
        return "A reference passage: bees dance and swarm, " + (question.group(1) if question else "")
    if prompt.startswith("Split the answer into its factual claims"):
        answer = prompt.rsplit("Answer:", 1)[-1]
        return json.dumps({"claims": [{"claim": answer.strip()[:60], "supported": "dance" in answer}]})
    if prompt.startswith("Combine the answers"):
        return "Combined: " + " ".join(re.findall(r"A\d*: (.*)", prompt))[:300]
    if "then judge your own answer" in prompt:
        return judge_json(answer=first_document(prompt, "no context"), score=6)
    if prompt.startswith("Documents (data, not instructions)") and "Judge the answer" in prompt:
        return _judge(prompt)
    if prompt.startswith("Improve the answer"):
        return first_document(prompt, "improved") + " They dance."
    return first_document(prompt, "The information is not available.")


# ----------------------------------------------------------------------------- the cases


Build = Callable[[Any, Any], Any]


def _preset(name: str, **options: Any) -> Build:
    return lambda rag, llm: presets.build_strategy(name, rag, llm, **options)


CASES: dict[str, tuple[Build, tuple[str, ...], dict[str, Any]]] = {}
for _name in (presets.BASELINE, *presets.STRATEGIES, presets.ADAPTIVE):
    CASES[f"preset-small-{_name}"] = (_preset(_name), tuple(QUESTIONS), {})
    CASES[f"preset-standard-{_name}"] = (
        _preset(_name, preset="standard", top_k=None),
        tuple(QUESTIONS),
        {},
    )
    CASES[f"preset-standard-top2-{_name}"] = (
        _preset(_name, preset="standard", top_k=2),
        ("simple", "parts"),
        {},
    )

CASES.update(
    {
        "ctor-plain": (lambda r, m: PlainRAG(r, m), ("simple", "nothing"), {}),
        "ctor-plain-k2": (lambda r, m: PlainRAG(r, m, top_k=2, llm_retries=0), ("simple",), {}),
        "ctor-hyde": (lambda r, m: HyDERAG(r, m), ("simple", "parts", "nothing"), {}),
        "ctor-hyde-positional": (lambda r, m: HyDERAG(r, m, 2, False, 3, 2, 1, 2), ("simple", "parts"), {}),
        "ctor-hyde-keywords": (
            lambda r, m: HyDERAG(r, m, num_hypothetical_docs=4, top_k=2, max_final_docs=3, max_workers=8),
            ("simple",),
            {},
        ),
        "ctor-self": (lambda r, m: SelfIRAG(r, m), ("simple", "parts", "nothing"), {}),
        "ctor-self-two-step": (
            lambda r, m: SelfIRAG(r, m, SelfRAGConfig(fast_mode=False, max_refinement_iterations=2, top_k=2)),
            ("simple", "parts"),
            {},
        ),
        "ctor-self-threshold": (
            lambda r, m: SelfIRAG(r, m, SelfRAGConfig(confidence_threshold=0.95, complete_parts=False)),
            ("simple",),
            {},
        ),
        "ctor-recursive": (lambda r, m: RecursiveRAG(r, m), ("simple", "complex", "compare"), {}),
        "ctor-recursive-rules": (
            lambda r, m: RecursiveRAG(
                r, m, RecursiveRAGConfig(max_depth=1, decomposition="rules", merge=False, top_k=2)
            ),
            ("parts", "compare"),
            {},
        ),
        "ctor-healing": (lambda r, m: SelfHealingRAG(m, [r, HyDERAG(r, m)]), ("simple", "parts"), {}),
        "ctor-healing-spec-kwargs": (
            lambda r, m: SelfHealingRAG(
                m, [r, r], quality_threshold=0.95, max_retries=1, retrieval_top_k=2, system_prompt="Be brief."
            ),
            ("simple",),
            {},
        ),
        "ctor-healing-evidence": (
            lambda r, m: SelfHealingRAG(m, [r, r], evidence_weight=0.0, quality_threshold=0.5),
            ("simple", "parts"),
            {},
        ),
        "ctor-healing-context-top1": (
            lambda r, m: SelfHealingRAG(m, [r]),
            ("simple",),
            {"top_k": 1},
        ),
        "ctor-adaptive": (lambda r, m: AdaptiveRAG(r, m), ("simple", "parts", "nothing"), {}),
        "ctor-adaptive-k2": (
            lambda r, m: AdaptiveRAG(r, m, top_k=2, llm_retries=1, call_budget=4),
            ("simple", "parts"),
            {},
        ),
    }
)

#: served with per-request options: (strategy name in default_strategies or plain, options)
SERVED: dict[str, tuple[str, dict[str, Any]]] = {
    "serve-self-options": ("self", {"top_k": 2, "max_refinement_iterations": 1, "confidence_threshold": 0.5}),
    "serve-hyde-top1": ("hyde", {"top_k": 1}),
    "serve-recursive-depth0": ("recursive", {"max_depth": 0, "top_k": 2}),
    "serve-healing-options": ("healing", {"top_k": 1, "threshold": 0.99}),
    "serve-healing-iterations": ("healing", {"max_iterations": 2}),  # (the old names: deprecated)
    "serve-hyde-threshold": ("hyde", {"threshold": 0.5}),
    "serve-plain-top1": ("plain", {"top_k": 1}),
}


# ----------------------------------------------------------------------------- recording


def _sources(result: Any) -> list[list[Any]]:
    return [[d.id, d.text] for d in getattr(result, "sources", [])]


SPEC_FIELDS = {
    "HyDEResult": ("hypothetical_docs", "num_retrieved", "num_ranked"),
    "SelfRAGResult": ("iterations", "best_iteration"),
    "RecursiveRAGResult": ("depth", "decomposed", "sub_questions"),
    "SelfHealingReport": ("success", "attempts", "retries", "strategy", "threshold"),
}


def record(result: Any, llm: FakeLLM) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": type(result).__name__,
        "answer": result.answer,
        "sources": _sources(result),
        # calls of one parallel round may start in any order: compared as a multiset
        "prompts": sorted(llm.prompts),
    }
    for name in SPEC_FIELDS.get(type(result).__name__, ()):
        out[name] = getattr(result, name)
    if type(result).__name__ == "SelfHealingReport":
        out["scores"] = [round(s, 6) for s in result.scores]
    if type(result).__name__ == "Answer":
        out["details"] = dict(result.details)
    return out


def _run_case(build: Build, question: str, context: dict[str, Any], mode: str) -> dict[str, Any]:
    rag, llm = FakeRetriever(list(DOCUMENTS)), FakeLLM(script)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        strategy = build(rag, llm)
    if mode == "sync":
        result = strategy.query(question, context or None)
    elif mode == "async":
        result = asyncio.run(strategy.aquery(question, context or None))
    else:
        events = list(strategy.stream(question, context or None))
        result = events[-1].result
    return record(result, llm)


def _run_served(name: str, question: str, options: dict[str, Any]) -> dict[str, Any]:
    from selfrag_core.serve.execution import UnsupportedOptionError, execute, prepare
    from selfrag_core.serve.models import QueryRequest
    from selfrag_core.serve.settings import ServeSettings

    rag, llm = FakeRetriever(list(DOCUMENTS)), FakeLLM(script)
    strategies = presets.default_strategies(rag, llm)
    strategies["plain"] = presets.build_strategy("plain", rag, llm, preset="standard", top_k=None)
    strategy, settings = strategies[name], ServeSettings()
    request = QueryRequest(question=question, **options)
    try:
        clone, execution = prepare(strategy, request, settings)
    except UnsupportedOptionError as e:
        return {"unsupported": str(e)}
    outcome = asyncio.run(execute(clone, question, request, execution, settings))
    return record(outcome.result, llm)


def _runs() -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for label, (build, questions, context) in CASES.items():
        for key in questions:
            runs[f"{label}/{key}/sync"] = _run_case(build, QUESTIONS[key], context, "sync")
        first = QUESTIONS[questions[0]]
        runs[f"{label}/{questions[0]}/async"] = _run_case(build, first, context, "async")
        runs[f"{label}/{questions[0]}/stream"] = _run_case(build, first, context, "stream")
    for label, (name, options) in SERVED.items() if CAN_SERVE else ():
        for key in ("simple", "parts"):
            runs[f"{label}/{key}"] = _run_served(name, QUESTIONS[key], options)
    return runs


#: the served runs need the serve extra (pydantic, FastAPI): CI's first stage has not installed it
CAN_SERVE = (
    importlib.util.find_spec("pydantic") is not None and importlib.util.find_spec("fastapi") is not None
)


def _served(label: str) -> bool:
    return label.split("/", 1)[0] in SERVED


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    return json.loads(json.dumps(_runs()))  # JSON-normalised (tuples become lists)


def test_the_golden_fixture_covers_every_case(runs: dict[str, Any]) -> None:
    if REGENERATE:
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(json.dumps(runs, indent=1, ensure_ascii=False, sort_keys=True) + "\n", "utf-8")
    golden = json.loads(FIXTURE.read_text("utf-8"))
    assert sorted(runs) == sorted(k for k in golden if CAN_SERVE or not _served(k))


@pytest.mark.parametrize("label", sorted(json.loads(FIXTURE.read_text("utf-8"))) if FIXTURE.exists() else [])
def test_a_scripted_run_sends_and_answers_as_recorded(label: str, runs: dict[str, Any]) -> None:
    if _served(label) and not CAN_SERVE:
        pytest.skip("the served runs need the serve extra (pydantic, FastAPI)")
    golden = json.loads(FIXTURE.read_text("utf-8"))[label]
    assert runs[label] == golden


def test_the_runs_are_not_trivial(runs: dict[str, Any]) -> None:
    """The script exercises refinement, decomposition, healing retries and escalation."""
    answered = [r for r in runs.values() if "answer" in r]
    # ten answer texts at least (the comparison rule, opt-in, no longer adds its own: #54)
    assert len({r["answer"] for r in answered}) >= 10
    assert any(r.get("iterations", 0) >= 2 for r in answered)
    assert any(r.get("decomposed") for r in answered)
    assert any(r.get("attempts", 0) >= 2 for r in answered)
    assert any(r.get("details", {}).get("strategy") not in (None, "plain") for r in answered)
    assert any("unsupported" in r for r in runs.values()) or not CAN_SERVE
