"""The demo's two-part question, answered on both parts by ``recursive`` and ``self`` with the
default local model (SmolLM2-135M) over the demo corpus. Marked slow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import selfrag_core
from selfrag_core import cli

pytestmark = pytest.mark.slow
pytest.importorskip("llama_cpp")
pytest.importorskip("bm25s")

QUESTION = "What makes a volcano erupt, and how do vaccines train the immune system?"
VOLCANO = re.compile(r"magma|gas|pressure|erupt|volcan", re.I)
VACCINE = re.compile(r"immune|vaccin|antibod|pathogen", re.I)


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    corpus = Path(selfrag_core.__file__).parent / "data" / "demo"
    index = str(tmp_path_factory.mktemp("demo") / "idx")
    assert cli.main(["index", str(corpus), "--index", index, "--embedder", "hashing", "--plain"]) == 0
    return index


@pytest.mark.parametrize("strategy", ["recursive", "self"])
def test_both_parts_of_the_demo_question_are_answered(
    strategy: str, demo_index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert cli.main(["ask", QUESTION, "--index", demo_index, "--strategy", strategy, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    answer = data["answer"]
    assert VOLCANO.search(answer) and VACCINE.search(answer), answer
    titles = {s["metadata"].get("title") for s in data["sources"]}
    assert {"volcanoes.md", "vaccines.txt"} <= titles, titles
    if strategy == "recursive":  # each part asked on its own, by rule (no JSON from the small model)
        assert data["sub_questions"] == [
            "What makes a volcano erupt?", "How do vaccines train the immune system?",
        ]  # fmt: skip
