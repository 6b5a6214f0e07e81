"""The ``selfrag`` CLI with the scripted LLM (``--llm fake``) and the hashing embedder:
indexing, asking with every strategy, stats, the demo, and every bad-input case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import selfrag_core
from selfrag_core import cli
from selfrag_core.cli.commands import demo_questions
from selfrag_core.cli.files import default_index_dir, read_text
from selfrag_core.local import embeddings as local_embeddings
from selfrag_core.local import models
from selfrag_core.presets import STRATEGIES, open_index

pytest.importorskip("bm25s")

FAST = ["--embedder", "hashing"]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "bees.md").write_text(
        "# Bees\n\nHoneybees dance to show where flowers are.\n", encoding="utf-8"
    )
    (folder / "sub" / "volcano.txt").write_text("Volcanoes erupt when gas pressure breaks the rock.\n")
    (folder / "code.py").write_text("def add(a, b):\n    return a + b\n")
    (folder / "nile_ar.txt").write_text("يصب نهر النيل في البحر الأبيض المتوسط.\n", encoding="utf-8")
    return folder


@pytest.fixture
def index_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "index"
    monkeypatch.setenv("SELFRAG_INDEX", str(target))
    return target


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def indexed(capsys: pytest.CaptureFixture[str], index_dir: Path) -> dict[str, object]:
    code, out, _ = run(capsys, "stats", "--json", "--index", str(index_dir))
    assert code == 0
    stats: dict[str, object] = json.loads(out)
    return stats


# ----------------------------------------------------------------------------- index


def test_index_reads_folders_recursively_and_skips_unchanged(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "index", str(docs), *FAST)
    assert code == 0
    assert "4 file(s) read" in out
    stats = indexed(capsys, index_dir)
    assert stats["sources"] == 4 and stats["search"] == "hybrid"
    manifest_before = (index_dir / "manifest.json").read_bytes()
    code, out, _ = run(capsys, "index", str(docs), *FAST)
    assert code == 0 and "0 new chunk(s)" in out
    assert (index_dir / "manifest.json").read_bytes() == manifest_before  # nothing rewritten


def test_index_skips_hidden_and_tool_folders_and_binary_suffixes(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    (docs / ".git").mkdir()
    (docs / ".git" / "config").write_text("[core]\n")
    (docs / "__pycache__").mkdir()
    (docs / "__pycache__" / "x.txt").write_text("cached")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    code, out, _ = run(capsys, "index", str(docs), *FAST)
    assert code == 0
    assert "4 file(s) read" in out and "1 file(s) skipped" in out
    assert indexed(capsys, index_dir)["sources"] == 4


def test_env_and_flag_choose_the_index_location(capsys, docs, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SELFRAG_INDEX", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_index_dir() == tmp_path / "xdg" / "selfrag" / "index"
    monkeypatch.setenv("SELFRAG_INDEX", str(tmp_path / "env"))
    assert default_index_dir() == tmp_path / "env"
    flag = tmp_path / "flag"
    assert run(capsys, "index", str(docs / "bees.md"), "--index", str(flag), *FAST)[0] == 0
    assert (flag / "manifest.json").is_file() and not (tmp_path / "env").exists()


def test_default_location_without_any_setting(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SELFRAG_INDEX", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_index_dir() == tmp_path / ".local" / "share" / "selfrag" / "index"


# ----------------------------------------------------------------------------- ask


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ask_every_strategy(capsys, docs, index_dir, strategy) -> None:  # type: ignore[no-untyped-def]
    assert run(capsys, "index", str(docs), *FAST)[0] == 0
    code, out, _ = run(capsys, "ask", "Why do volcanoes erupt?", "--strategy", strategy, "--llm", "fake")
    assert code == 0
    assert "Volcanoes erupt when gas pressure breaks the rock." in out
    assert "volcano.txt" in out  # the source
    assert "LLM calls:" in out and "time:" in out


def test_ask_prints_the_strategy_quality_line(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    # the small preset stops at a well-supported first answer without asking the judge
    line = run(capsys, "ask", "Why do volcanoes erupt?", "--llm", "fake")[1]
    assert "Confidence unknown (not asked: the answer is well supported" in line
    from selfrag_core.types import EvaluationResult, RefinementStep, SelfRAGResult

    judged = EvaluationResult(0.8, 0.8, 0.8, 0.8, 0.8)
    step = RefinementStep(1, "An answer.", judged, 0.8)
    result = SelfRAGResult("An answer.", 0.8, 1, [step], best_iteration=1)
    assert result.summary() == "confidence 0.80 after 1 iteration(s)"
    healing = run(capsys, "ask", "Why do volcanoes erupt?", "--llm", "fake", "--strategy", "healing")[1]
    # each attempt's score by the strategy that made it, and whose answer is shown
    assert "Faithfulness per attempt: plain retrieval 1.00; plain retrieval reached the threshold" in healing


def test_ask_prints_numbered_sources_and_the_citations(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    out = run(capsys, "ask", "Why do volcanoes erupt?", "--llm", "fake", "--strategy", "plain")[1]
    sources = [line for line in out.splitlines() if line.startswith("  [")]
    assert sources and sources[0].startswith("  [1] ") and ": " in sources[0]  # file, score, snippet
    # the fake model copies a sentence of the context: a source supports it, attributed (no marker)
    assert re.search(r"Citations: [1-9]\d* of [1-9]\d* sentence\(s\) supported by a source \(0 cited", out)


def test_ask_json_is_the_result_dict(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    code, out, _ = run(
        capsys, "ask", "Where does the Nile flow?", "--llm", "fake", "--json", "--strategy", "hyde"
    )
    assert code == 0
    data = json.loads(out)
    assert {"answer", "hypothetical_docs", "sources", "trace"} <= data.keys()
    assert data["trace"]["llm_calls"] == 2


def test_arabic_question_and_document(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    code, out, _ = run(capsys, "ask", "أين يصب نهر النيل؟", "--llm", "fake", "--json")
    assert code == 0
    assert "البحر الأبيض المتوسط" in json.loads(out)["answer"]


# ----------------------------------------------------------------------------- stats and demo


def test_stats_plain(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    code, out, _ = run(capsys, "stats")
    assert code == 0
    assert "chunks:" in out and "hashing" in out and str(index_dir) in out


def test_demo_with_the_fake_llm(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "demo"
    code, out, err = run(capsys, "demo", "--llm", "fake", "--index", str(target), "--questions", "3", *FAST)
    assert code == 0
    assert "demo: 15 answers" in out  # plain first, the reference, then the four
    assert err.count("[plain]") == 3 and err.count("[hyde]") == 3 and err.count("[healing]") == 3
    # each answer's checks, and each strategy's read against plain's
    assert err.count("  checked: support ") == 15 and err.count("answers the question") == 15
    assert err.count("the same answer as plain") + err.count("a different answer from plain's") == 12
    assert "indexed 14 sample documents" in err
    assert "[self] أين يلتقي النيل" in err
    assert open_index(target, create=False).count() > 14
    code, out, err = run(capsys, "demo", "--llm", "fake", "--index", str(target), *FAST)  # 2 questions
    assert code == 0 and "demo: 10 answers" in out and "أين" not in err


def test_the_demo_corpus_ships_with_the_package() -> None:
    questions = demo_questions()
    assert len(questions) == 3 and any(cli_lang(q) == "ar" for q in questions)
    corpus = Path(selfrag_core.__file__).parent / "data" / "demo"
    files = sorted(p.name for p in corpus.iterdir())
    assert 12 <= len(files) <= 15
    assert sum(cli_lang(p.read_text(encoding="utf-8")) == "ar" for p in corpus.iterdir()) == 2


def cli_lang(text: str) -> str:
    from selfrag_core.prompts import detect_language

    return detect_language(text)


def test_module_entry_point(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "SELFRAG_INDEX": str(tmp_path / "none")}
    out = subprocess.run(
        [sys.executable, "-m", "selfrag_core", "stats"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 2
    assert out.stderr.startswith("selfrag: error: no index at")


# ----------------------------------------------------------------------------- bad input


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("selfrag: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_missing_paths_index_nothing(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "index", str(docs), "/no/such/file.txt", *FAST)
    assert code == 2
    assert "no such file or directory: /no/such/file.txt" in one_line_error(err)
    assert not index_dir.exists()


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("blob.dat", b"\x00\x01\x02binary\x00", "is a binary file"),
        ("empty.txt", b"  \n\n", "is empty"),
        ("latin.txt", "café au lait".encode("cp1252"), "is not UTF-8 text (byte 0xe9 at offset 3)"),
    ],
)
def test_bad_files_named_explicitly_are_skipped_with_exit_1(  # type: ignore[no-untyped-def]
    capsys, docs, index_dir, name, content, problem
) -> None:
    bad = docs / name
    bad.write_bytes(content)
    code, out, err = run(capsys, "index", str(docs / "bees.md"), str(bad), *FAST)
    assert code == 1
    assert f"skipped: {bad} {problem}" in err
    assert "1 file(s) read" in out
    assert indexed(capsys, index_dir)["sources"] == 1


def test_bad_files_inside_folders_are_counted_and_listed_with_verbose(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    (docs / "empty.md").write_text("")
    (docs / "data.bin2").write_bytes(b"\x00" * 10)
    code, out, err = run(capsys, "index", str(docs), *FAST)
    assert code == 0 and "2 file(s) skipped (-v lists them)" in out
    assert "skipped:" not in err
    code, out, err = run(capsys, "index", str(docs), "-v", *FAST)
    assert "empty.md is empty" in err and "data.bin2 is a binary file" in err


def test_non_utf8_with_encoding_is_decoded_with_a_warning(capsys, tmp_path, index_dir, caplog) -> None:  # type: ignore[no-untyped-def]
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Le café est très bon.".encode("cp1252"))
    code, _, _ = run(capsys, "index", str(latin), "--encoding", "cp1252", *FAST)
    assert code == 0
    assert "not UTF-8: decoded as cp1252" in caplog.text
    out = run(capsys, "ask", "café", "--llm", "fake")[1]
    assert "Le café est très bon." in out


def test_utf16_with_bom_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "u16.txt"
    f.write_bytes("hello wide world".encode("utf-16"))
    assert read_text(f) == "hello wide world"


def test_nothing_indexable_exits_1_without_creating_an_index(capsys, tmp_path, index_dir) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "only_empty"
    folder.mkdir()
    (folder / "a.txt").write_text("")
    code, _, err = run(capsys, "index", str(folder), *FAST)
    assert code == 1
    assert "nothing to index" in err
    assert not (index_dir / "manifest.json").exists()


def test_corrupt_index_is_reported_and_left_untouched(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs / "bees.md"), *FAST)
    data_dir = next(index_dir.glob("data-*"))
    store = data_dir / "store.json"
    store.write_bytes(store.read_bytes()[:-5])
    snapshot = {p: p.read_bytes() for p in index_dir.rglob("*") if p.is_file()}
    for argv in (["stats"], ["ask", "bees?", "--llm", "fake"], ["index", str(docs), *FAST]):
        code, _, err = run(capsys, *argv)
        assert code == 2
        assert "corrupt" in one_line_error(err)
    assert {p: p.read_bytes() for p in index_dir.rglob("*") if p.is_file()} == snapshot


def test_foreign_directory_is_refused(capsys, docs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"\xff\xd8")
    code, _, err = run(capsys, "index", str(docs), "--index", str(foreign), *FAST)
    assert code == 2
    assert "not a selfrag index" in one_line_error(err) or "without a selfrag index" in err
    assert sorted(p.name for p in foreign.iterdir()) == ["holiday.jpg"]
    (foreign / "manifest.json").write_text('{"format": "something-else"}')
    code, _, err = run(capsys, "stats", "--index", str(foreign))
    assert code == 2 and "belongs to something else" in one_line_error(err)


def test_index_path_that_is_a_file(capsys, docs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "index", str(docs), "--index", str(docs / "bees.md"), *FAST)
    assert code == 2 and "is a file, not an index directory" in one_line_error(err)


def test_ask_without_an_index(capsys, index_dir) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "ask", "anything?", "--llm", "fake")
    assert code == 2
    assert "run `selfrag index PATH...` first" in one_line_error(err)


def test_empty_question(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    code, _, err = run(capsys, "ask", "   ", "--llm", "fake")
    assert code == 2 and "query is empty" in one_line_error(err)


def test_unknown_llm(capsys, docs, index_dir) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    code, _, err = run(capsys, "ask", "bees?", "--llm", "gpt-17")
    assert code == 2 and "neither a known model" in one_line_error(err)
    code, _, err = run(capsys, "ask", "bees?", "--llm", "nope:model")
    message = one_line_error(err)  # the wording depends on whether the LangChain adapter is installed
    assert code == 2 and "nope" in message and "provider" in message.lower()


def test_missing_local_extra_names_the_install_command(capsys, docs, index_dir, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs), *FAST)
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name, *a: None)
    code, _, err = run(capsys, "ask", "bees?")  # --llm local is the default
    assert code == 2 and "pip install 'selfrag[local]'" in one_line_error(err)
    monkeypatch.setattr(local_embeddings.importlib.util, "find_spec", lambda name, *a: None)
    code, _, err = run(
        capsys, "index", str(docs), "--index", str(index_dir.parent / "new"), "--embedder", "minilm"
    )
    assert code == 2 and "torch==2.13.0" in one_line_error(err)


def test_auto_embedder_falls_back_to_lexical_when_not_installed(capsys, docs, index_dir, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(local_embeddings.importlib.util, "find_spec", lambda name, *a: None)
    assert run(capsys, "index", str(docs))[0] == 0
    stats = indexed(capsys, index_dir)
    assert stats["search"] == "lexical" and stats["embedder"] is None


def test_interrupt_keeps_the_previous_index(capsys, docs, index_dir, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "index", str(docs / "bees.md"), *FAST)
    before = indexed(capsys, index_dir)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    from selfrag_core.store import RAG

    monkeypatch.setattr(RAG, "add_prepared", interrupted)  # `selfrag index` adds what it prepared
    code, _, err = run(capsys, "index", str(docs), *FAST)
    assert code == 130 and "interrupted" in err
    monkeypatch.undo()
    assert indexed(capsys, index_dir) == before


class NamedLikeMiniLM:
    """A deterministic stand-in carrying MiniLM's name (the CLI keys on the stored name)."""

    name = local_embeddings.LocalEmbeddings.name

    def __init__(self) -> None:
        from selfrag_core.store import HashingEmbeddings

        self._inner = HashingEmbeddings(384)

    def embed_documents(self, texts: list[str]) -> object:
        return self._inner.embed_documents(texts)

    def embed_query(self, text: str) -> object:
        return self._inner.embed_query(text)


def test_a_minilm_index_reopens_with_minilm_and_stats_does_not_load_it(  # type: ignore[no-untyped-def]
    capsys, docs, index_dir, monkeypatch
) -> None:
    from selfrag_core.store import RAG

    rag = RAG(NamedLikeMiniLM(), path=index_dir)
    rag.index("Honeybees dance to show where flowers are.", source="bees")
    rag.save()
    loads: list[str] = []

    class CountedMiniLM(NamedLikeMiniLM):
        def __init__(self) -> None:
            loads.append("minilm")
            super().__init__()

    monkeypatch.setattr(local_embeddings, "LocalEmbeddings", CountedMiniLM)
    stats = indexed(capsys, index_dir)
    assert stats["embedder"] == NamedLikeMiniLM.name and stats["search"] == "hybrid"
    assert loads == []
    code, out, _ = run(capsys, "ask", "Where are the flowers?", "--llm", "fake")
    assert code == 0 and "Honeybees dance" in out
    assert loads == ["minilm"]


def test_serve_subcommand_is_wired() -> None:
    from selfrag_core.cli.commands import cmd_serve
    from selfrag_core.cli.parser import build_parser

    args = build_parser().parse_args(["serve", "--port", "9001", "--llm", "fake", "--max-llm-calls", "5"])
    assert (
        args.func is cmd_serve and args.port == 9001 and args.max_llm_calls == 5 and args.host == "127.0.0.1"
    )
