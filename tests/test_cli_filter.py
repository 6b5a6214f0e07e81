"""``selfrag ask --filter KEY=VALUE`` (issue #52): the HTTP service's ``metadata_filter``
from the command line, e.g. only one file of the index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selfrag_core import cli
from selfrag_core.cli.commands import metadata_filter_of
from selfrag_core.cli.files import CLIError

pytest.importorskip("bm25s")

FAST = ["--embedder", "hashing"]
QUESTION = "What do bees and volcanoes do?"


@pytest.fixture
def index_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bees.md").write_text("Honeybees dance to show where flowers are.\n", encoding="utf-8")
    (docs / "volcano.txt").write_text("Volcanoes erupt when gas pressure breaks the rock.\n")
    target = tmp_path / "index"
    monkeypatch.setenv("SELFRAG_INDEX", str(target))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["index", str(docs), *FAST]) == 0
    capsys.readouterr()
    return target


def ask(capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, dict[str, object] | None, str]:
    code = cli.main(["ask", QUESTION, "--llm", "fake", "--json", "--strategy", "plain", "-q", *options])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def titles(result: dict[str, object] | None) -> set[str]:
    assert result is not None
    return {s["metadata"]["title"] for s in result["sources"]}  # type: ignore[attr-defined,index]


def test_a_filter_keeps_only_the_chunks_whose_metadata_matches(capsys, index_dir) -> None:  # type: ignore[no-untyped-def]
    code, unfiltered, _ = ask(capsys)
    assert code == 0 and titles(unfiltered) == {"bees.md", "volcano.txt"}
    code, result, _ = ask(capsys, "--filter", "title=bees.md")
    assert code == 0 and titles(result) == {"bees.md"}
    assert "Honeybees" in result["answer"]  # type: ignore[index]
    # a source as `selfrag index` stored it: a relative path is made absolute
    code, result, _ = ask(capsys, "--filter", "source=docs/volcano.txt")
    assert code == 0 and titles(result) == {"volcano.txt"}
    code, result, _ = ask(capsys, "--filter", "title=bees.md", "--filter", "source=docs/volcano.txt")
    assert code == 1 and result is None  # both must hold: no chunk does


def test_a_filter_nothing_matches_says_so(capsys, index_dir) -> None:  # type: ignore[no-untyped-def]
    code, _, err = ask(capsys, "--filter", "title=pep-0572.txt")
    assert code == 1
    assert "no indexed chunk matches --filter title=pep-0572.txt" in err and "title, its file name" in err


@pytest.mark.parametrize(
    ("given", "message"),
    [("title", "is not KEY=VALUE"), ("=bees.md", "is not KEY=VALUE"), ("title=a title=b", "given twice")],
)
def test_a_malformed_filter_is_a_one_line_error(capsys, index_dir, given: str, message: str) -> None:  # type: ignore[no-untyped-def]
    code, _, err = ask(capsys, *(f for part in given.split(" ") for f in ("--filter", part)))
    assert code == 2 and message in err and err.count("selfrag: error:") == 1


def test_values_read_as_the_http_filters_json_scalars() -> None:
    assert metadata_filter_of(["year=2020", "draft=false", "score=0.5", 'code="572"', "title=a=b"]) == {
        "year": 2020,
        "draft": False,
        "score": 0.5,
        "code": "572",
        "title": "a=b",
    }
    assert metadata_filter_of(["x=null", "y=NaN", "z=[1]"]) == {"x": "null", "y": "NaN", "z": "[1]"}
    with pytest.raises(CLIError, match="is not KEY=VALUE"):
        metadata_filter_of(["nothing"])
