import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_core_alone_never_imports_llama_index() -> None:
    code = (
        "import sys, selfrag_core, selfrag_core.strategies\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('llama_index', 'selfrag_llamaindex')))\n"
        "print(bad)\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_public_api() -> None:
    import selfrag_llamaindex

    assert set(selfrag_llamaindex.__all__) == {
        "LlamaIndexBackend", "LlamaIndexLLM", "SelfRAGEmbedding", "SelfRAGQueryEngine", "SelfRAGStepEvent",
        "StrategyRetriever", "as_backend",
    }  # fmt: skip
    for name in selfrag_llamaindex.__all__:
        assert getattr(selfrag_llamaindex, name) is not None
