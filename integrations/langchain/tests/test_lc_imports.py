"""The public API imports; the core never imports LangChain."""

from __future__ import annotations

import subprocess
import sys

import selfrag_langchain

EXPECTED_ALL = [
    "LangChainBackend",
    "LangChainLLM",
    "SelfRAGEmbeddings",
    "SelfRAGRunnable",
    "StrategyRetriever",
    "VectorStoreSearch",
    "as_backend",
    "as_llm",
    "from_document",
    "make_chat_model",
    "make_llm",
    "raw_score_kind",
    "to_document",
]


def test_all_imports() -> None:
    assert sorted(selfrag_langchain.__all__) == sorted(EXPECTED_ALL)
    assert all(hasattr(selfrag_langchain, name) for name in EXPECTED_ALL)


def test_importing_the_core_never_imports_langchain() -> None:
    code = (
        "import sys, selfrag_core, selfrag_core.strategies, selfrag_core.testing\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'langchain', 'langchain_core', 'langchain_community', 'langsmith', 'selfrag_langchain'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
