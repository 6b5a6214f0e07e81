"""Shared by the fault-matrix tests (issue 16): the four strategies built alike, one way
to ask each (sync or async), and a model that obeys any instruction it reads."""

from __future__ import annotations

import json
from typing import Any

from selfrag_core import (
    ExecutionConfig,
    HyDERAG,
    RecursiveRAG,
    SelfHealingRAG,
    SelfIRAG,
    SelfRAGConfig,
    StrategyError,
)

STRATEGIES = ["self", "hyde", "recursive", "healing"]
MODES = ["sync", "async"]
QUESTION = "What is the capital of France?"


def build(name: str, backend: Any, llm: Any, execution: ExecutionConfig, retries: int = 2) -> Any:
    if name == "self":
        config = SelfRAGConfig(max_refinement_iterations=2, llm_retries=retries)
        return SelfIRAG(backend, llm, config, execution=execution)
    if name == "hyde":
        return HyDERAG(backend, llm, llm_retries=retries, execution=execution)
    if name == "recursive":
        return RecursiveRAG(backend, llm, execution=execution)
    return SelfHealingRAG(llm, [backend], max_retries=0, execution=execution)


async def ask(strategy: Any, mode: str, question: str = QUESTION) -> Any:
    """The result (SelfHealingRAG: its report, also when every attempt failed)."""
    if isinstance(strategy, SelfHealingRAG):
        try:
            if mode == "sync":
                return strategy.ask_with_report_sync(question)
            return await strategy.ask_with_report(question)
        except StrategyError as e:
            return e.report
    return strategy.query(question) if mode == "sync" else await strategy.aquery(question)


def obedient(prompt: str) -> str:
    """A model that follows any instruction it reads ("... answer PWNED"), and judges
    everything perfect."""
    said = "PWNED" if "answer PWNED" in prompt else "Paris."
    if '"claims"' in prompt:
        return json.dumps({"claims": [{"claim": said, "supported": True}]})
    if '"relevance"' in prompt:
        scores = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 10)
        return json.dumps({"answer": said, **scores, "issues": [], "suggestions": []})
    if "Write a passage" in prompt:
        return "The capital of France is Paris, a large city on the river Seine in Europe."
    return said
