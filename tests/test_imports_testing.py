"""Import hygiene and the shipped test doubles."""

from __future__ import annotations

import ast
import asyncio
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from selfrag_core.testing import FakeLLM, FakeRetriever, FakeStructuredLLM

#: the core's modules the adapters may import from (each one's ``__all__``)
PUBLIC_MODULES = ("selfrag_core", "selfrag_core.backends")


def test_core_import_pulls_no_framework() -> None:
    code = (
        "import sys, selfrag_core, selfrag_core.testing\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "{'langchain', 'langchain_core', 'llama_index', 'torch', 'sentence_transformers', 'llama_cpp', "
        "'fastapi', 'bm25s'}]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_is_exactly_the_documented_one() -> None:
    """What ``from selfrag_core import *`` gives: a change to the public API is a change
    to this list (the specification's three underscore helpers are its only private-looking names)."""
    import selfrag_core

    assert sorted(selfrag_core.__all__) == sorted(
        ["AdaptiveRAG", "CAPABLE", "SMALL_LOCAL", "ModelProfile", "profile_of", "BackendLike", "LLMLike",
         "Answer", "BudgetExceededError", "CacheMissError", "CachedLLM", "ConfigurationError",
         "ConversationMemory", "EvaluationResult",
         "ExecutionConfig", "FaithfulnessMetric", "FaithfulnessScore", "Generate", "Grounding",
         "GroundingConfig", "HealingAttempt", "HyDERAG", "HyDEResult", "LLMCallError", "LLMOutput",
         "LLMTimeoutError", "MissingDependencyError", "Note", "OpenAICompatibleLLM",
         "Parallel", "ParseError", "Plan", "PlainRAG", "DraftsRAG", "DraftsRAGConfig",
         "QueryTimeoutError", "RAGSystemError", "RecursiveRAG", "RecursiveRAGConfig", "RecursiveRAGResult",
         "RefinementStep", "Result", "NO_ANSWER_REASONS",
         "RetrievalError", "RetrievalTimeoutError", "RetrievalWatch", "Retrieve",
         "RetrieveMany",
         "AdaptiveRAGConfig", "HyDERAGConfig", "PlainRAGConfig", "SelfHealingRAGConfig", "StrategyConfig",
         "RetrievedDoc", "Run", "ScoreKind", "SelfHealingRAG", "SelfHealingReport", "SelfIRAG",
         "SelfRAGConfig", "SelfRAGResult", "Step", "Strategy", "StrategyError", "StreamEvent", "SubAnswer",
         "Trace", "TraceEvent", "WritableBackend", "_call_llm", "_deduplicate", "_retrieve_safe",
         "aingest", "aretrieve_documents", "arun_query", "astream_query", "retrieve_documents",
         "check_strategy", "chunk_id", "content_source", "document_parts", "ingest",
         "normalize_results", "store_search", "astore_search", "shutting_down", "verify_answer",
         "AnswerRule", "ComparisonRule", "Finding",
         "observe_trace", "retrieve_or_empty", "run_query", "step_of", "stream_query"]
    )  # fmt: skip
    namespace: dict[str, object] = {}
    exec("from selfrag_core import *", namespace)  # every listed name exists
    assert set(selfrag_core.__all__) <= namespace.keys()


def test_adapters_import_only_public_names() -> None:
    """The LangChain and LlamaIndex adapters use the core's public API only: they import
    from ``selfrag_core`` (the library) and ``selfrag_core.backends`` (the embedder they
    wrap), never from a module under them (pyproject's ``adapters-public`` contract checks
    the modules too), and every name they import is in that module's ``__all__``, never an
    underscored helper or a module's incidental import."""
    root = Path(__file__).resolve().parents[1] / "integrations"
    private: list[str] = []
    sources = sorted(root.glob("*/selfrag_*/**/*.py"))
    assert len(sources) >= 10  # both adapters' packages were found
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                private += [
                    f"{path.name}: import {a.name}" for a in node.names if a.name.startswith("selfrag_core.")
                ]
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "selfrag_core":
                if node.module not in PUBLIC_MODULES:
                    private.append(f"{path.name}: from {node.module}")
                    continue
                public = getattr(importlib.import_module(str(node.module)), "__all__", ())
                private += [
                    f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name not in public
                ]
    assert private == []


def test_backends_load_the_shared_embedder_on_first_use() -> None:
    """``selfrag_core.backends`` (``--backend``) loads the local models' modules only when
    an adapter asks for ``SharedEmbedder``."""
    code = (
        "import sys, selfrag_core.backends as b\n"
        "before = 'selfrag_core.local' in sys.modules\n"
        "b.SharedEmbedder, b.EMBEDDER_NAMES\n"
        "print(before, 'selfrag_core.local' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_submodules_export_what_they_define() -> None:
    for name in (
        *PUBLIC_MODULES,
        "selfrag_core.retrieval",
        "selfrag_core.workers",
        "selfrag_core.backends.embedders",
    ):
        module = importlib.import_module(name)
        assert module.__all__ and all(hasattr(module, n) for n in module.__all__), name


def test_fake_llm_scripts() -> None:
    assert FakeLLM("fixed").generate("p") == "fixed"
    seq = FakeLLM(["a", "b"])
    assert [seq.generate("p") for _ in range(3)] == ["a", "b", "b"]
    cyc = FakeLLM(["a", "b"], cycle=True)
    assert [cyc.generate("p") for _ in range(3)] == ["a", "b", "a"]
    keyed = FakeLLM({"capital": "Paris"}, default="?")
    assert keyed.generate("the capital of France") == "Paris" and keyed.generate("other") == "?"
    fn = FakeLLM(lambda p: p[::-1])
    assert fn.generate("abc") == "cba"


def test_fake_llm_failures_and_log() -> None:
    llm = FakeLLM("ok", fail_on=[2], error=TimeoutError("boom"))
    assert llm.generate("one") == "ok"
    with pytest.raises(TimeoutError):
        llm.generate("two")
    assert llm.prompts == ["one", "two"] and llm.n_calls == 2
    scripted_error = FakeLLM([ValueError("bad"), "fine"])
    with pytest.raises(ValueError):
        scripted_error.generate("p")
    assert scripted_error.generate("p") == "fine"


def test_fake_llm_async_and_structured() -> None:
    llm = FakeStructuredLLM("{}", latency=0.01)
    assert asyncio.run(llm.agenerate_structured("p", {"type": "object"})) == "{}"
    assert llm.calls[0].is_async and llm.calls[0].schema == {"type": "object"}


def test_fake_retriever() -> None:
    r = FakeRetriever(["apples are red", "bananas are yellow"])
    docs = r.retrieve("red apples", 5)
    assert [d.text for d in docs] == ["apples are red"] and docs[0].score == 1.0
    assert asyncio.run(r.aretrieve("yellow", 1))[0].text == "bananas are yellow"
    with pytest.raises(ConnectionError):
        FakeRetriever(["x"], fail=ConnectionError("down")).retrieve("x", 1)
