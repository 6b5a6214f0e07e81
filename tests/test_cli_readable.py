"""Issue 34, findings 1, 4 and 5: progress a user sees in a terminal and in a log,
output a user can read (scores with their kind, snippets around the match, attempts
by strategy, recursive's reason in words, whole words), and the small traps (the demo
keyed by name, serve's plain route, RAG.load opening the recorded embedder, --version).
Every CLI output is captured; the LLM is the scripted fake, the embedder the hashing one."""

from __future__ import annotations

import functools
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import selfrag_core
from selfrag_core import cli
from selfrag_core.cli import commands
from selfrag_core.cli.output import print_result
from selfrag_core.cli.parser import build_parser
from selfrag_core.display import one_line, score_label, snippet
from selfrag_core.presets import open_index
from selfrag_core.progress import Progress, duration, status_line
from selfrag_core.types import (
    HealingAttempt,
    RecursiveRAGResult,
    RetrievedDoc,
    ScoreKind,
    SelfHealingReport,
    recursive_reason,
)

pytest.importorskip("bm25s")

FAST = ["--embedder", "hashing"]
ROOT = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    filler = " ".join(f"Filler sentence number {i} says nothing of interest here." for i in range(12))
    (folder / "volcano.txt").write_text(
        f"{filler} Volcanoes erupt when gas pressure breaks the rock above the magma chamber. {filler}\n",
        encoding="utf-8",
    )
    (folder / "bees.md").write_text(
        "# Bees\n\nHoneybees dance to show where flowers are.\n", encoding="utf-8"
    )
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return folder


# ----------------------------------------------------------------------------- finding 1: progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_has_counts_rate_and_time_left_at_a_steady_interval() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(plain=True, interval=10, stream=stream, clock=clock)
    with progress.task("indexing", 20, "files") as advance:
        advance(3)  # at 0 s: no line before the interval
        clock.now = 4.0
        advance(2)
        clock.now = 10.0
        advance(0)  # the interval is up: a line, even though nothing advanced and no description
        clock.now = 12.0
        advance(5, "a description")
        clock.now = 20.0
        advance(10, "last file")
    lines = stream.getvalue().splitlines()
    assert lines == [
        "indexing: 0/20 files (0%)",
        "indexing: 5/20 files (25%), 30 files/min, about 30 s left (10 s so far)",
        "indexing: 20/20 files (100%), 1.0 files/s, about 0 s left (20 s so far): last file",
        "indexing: done, 20 files in 20 s (1.0 files/s)",
    ]


def test_plain_progress_keeps_reporting_while_nothing_advances() -> None:
    stream = io.StringIO()
    with Progress(plain=True, interval=0.2, stream=stream).task("eval", 4, "questions"):
        time.sleep(0.9)  # one slow question: the log still hears from the step
    lines = stream.getvalue().splitlines()
    beats = [line for line in lines if line.startswith("eval: 0/4 questions (0%)")]
    assert len(beats) >= 3, lines  # the start line and at least two while waiting
    assert lines[-1].startswith("eval: done, 0 questions in")


def test_status_line_and_durations_read_as_words() -> None:
    assert status_line("eval", 0, 10, 75, "questions") == "eval: 0/10 questions (0%), 1 min 15 s so far"
    slow = status_line("eval", 2, 10, 120, "questions")
    assert slow == "eval: 2/10 questions (20%), 1.0 questions/min, about 8 min 0 s left (2 min 0 s so far)"
    assert [duration(s) for s in (42, 281, 1500, 3900)] == ["42 s", "4 min 41 s", "25 min", "1 h 5 min"]


def test_terminal_progress_shows_count_rate_and_time_left() -> None:
    pytest.importorskip("rich")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    progress = Progress(stream=stream)
    with progress.task("indexing", 4, "files") as advance:
        for _ in range(4):
            advance(1)
    shown = stream.getvalue()
    assert "4/4" in shown and "files" in shown and "files/s" in shown and "left" in shown


def test_index_in_a_log_reports_progress_without_a_description(capsys, docs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for plain in ([], ["--plain"]):  # stderr is no terminal here: plain lines either way
        target = tmp_path / f"index{len(plain)}"
        code, _, err = run(capsys, "index", str(docs), "--index", str(target), *FAST, *plain)
        assert code == 0, err
        chunks = open_index(target, create=False).count()  # counted by chunks (issue 52)
        assert chunks > 2 and f"indexing: 0/{chunks} chunks (0%)" in err
        assert f"indexing: done, {chunks} chunks in 0 s\n" in err  # no rate for a step under a second
        assert "reading files: done, 2 files in" in err


def test_eval_reports_progress_per_question_count(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"_id": "d1", "text": "Volcanoes erupt when gas pressure breaks the rock."}) + "\n",
        encoding="utf-8",
    )
    questions = tmp_path / "q.jsonl"
    rows = [
        {"id": f"q{i}", "question": "Why do volcanoes erupt?", "answers": ["gas pressure"]} for i in range(3)
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = run(
        capsys, "eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--strategies", "plain",
        "--no-cache", "--out", str(tmp_path / "out"), *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert "eval: 0/3 questions (0%)" in err and "eval: done, 3 questions in" in err


def test_setup_script_reports_its_quiet_phases(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = ROOT / "scripts" / "setup-local.sh"
    env = {"PATH": "/usr/bin:/bin", "SELFRAG_PROGRESS_INTERVAL": "1"}
    shown = subprocess.run(
        ["bash", "-c", f'source "{script}"; run_step "installing torch" 60 sleep 2.5'],
        capture_output=True, text=True, env=env, timeout=30, check=True,
    )  # fmt: skip
    lines = shown.stdout.splitlines()
    assert lines[0] == "setup: installing torch (usually about 1 min)..."
    assert any(line.startswith("setup: still installing torch, ") and "s so far" in line for line in lines)
    assert lines[-1].startswith("setup: installing torch: done in ")
    failing = subprocess.run(
        ["bash", "-c", f'source "{script}"; run_step "building" 1 false'],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert failing.returncode != 0 and "setup: building failed after" in failing.stderr


# ----------------------------------------------------------------------------- finding 4: readable output


def test_words_are_never_cut_mid_word() -> None:
    question = "Which river flows through the capital city of the country that hosted the games?"
    cut = one_line(question, 50)
    assert cut.endswith("…") and len(cut) <= 50
    assert question.startswith(cut[:-1]) and question[len(cut) - 1] == " "  # cut where a word ends


def test_demo_progress_lines_keep_whole_words(capsys, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(commands, "Progress", functools.partial(Progress, interval=0))  # a line per advance
    code, _, err = run(capsys, "demo", "--llm", "fake", "--index", str(tmp_path / "demo"), *FAST)
    assert code == 0, err
    questions = commands.demo_questions()[:2]
    cut = [line for line in err.splitlines() if line.startswith("demo: ") and line.endswith("…")]
    assert cut, err  # the second question (72 characters) is shortened
    for line in cut:
        shown = line.rsplit(": ", 1)[1].removesuffix("…")
        assert any(q.startswith(shown) and q[len(shown)] in " ," for q in questions), line


def test_snippet_shows_the_part_that_matched() -> None:
    text = (
        "Filler words fill the beginning of this chunk. " * 6 + "Honeybees dance to show flowers." + " x" * 80
    )
    shown = snippet(text, "Why do honeybees dance?", 100)
    assert "Honeybees dance" in shown and shown.startswith("…") and len(shown) <= 102
    assert snippet("Short text.", "anything", 100) == "Short text."
    assert snippet(text, "nothing here matches zzz", 100).startswith("Filler words")


def test_scores_carry_their_kind() -> None:
    assert score_label(RetrievedDoc("t", 0.8123, score_kind=ScoreKind.SIMILARITY)) == "similarity 0.812"
    assert (
        score_label(RetrievedDoc("t", 0.12, score_kind=ScoreKind.DISTANCE))
        == "distance 0.120 (lower is closer)"
    )
    assert score_label(RetrievedDoc("t", 3.2)) == "score 3.2 (scale unknown)"
    fused = RetrievedDoc(
        "t",
        0.0328,
        {"retrieval_score": 1.0, "retrieval_score_kind": "similarity"},
        score_kind=ScoreKind.SIMILARITY,
    )
    assert score_label(fused) == "fused rank 0.033, similarity 1.000"
    assert score_label(RetrievedDoc("t")) == ""


def test_ask_prints_scores_by_kind_and_snippets_around_the_match(capsys, docs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    index = ["--index", str(tmp_path / "index")]
    run(capsys, "index", str(docs), *index, *FAST)
    question = "Why do volcanoes erupt?"
    plain = run(capsys, "ask", question, "--llm", "fake", "--strategy", "plain", *index)[1]
    hyde = run(capsys, "ask", question, "--llm", "fake", "--strategy", "hyde", *index)[1]
    first = next(line for line in plain.splitlines() if line.startswith("  [1] "))
    assert "volcano.txt (similarity " in first and "Volcanoes erupt" in first and "…" in first
    assert "(score " not in plain  # never a bare number
    hyde_first = next(line for line in hyde.splitlines() if line.startswith("  [1] "))
    assert "(fused rank 0.0" in hyde_first and ", similarity " in hyde_first, hyde_first
    assert "sources ranked by fused rank" in hyde


def test_healing_summary_names_each_attempt_by_strategy_and_labels_its_score() -> None:
    report = SelfHealingReport(
        success=False, attempts=2, retries=1, strategy="RAG", scores=[0.6, 0.5], threshold=0.75,
        attempt_details=[HealingAttempt("RAG", "a", 0.6), HealingAttempt("HyDERAG", "b", 0.5)],
    )  # fmt: skip
    assert report.summary() == (
        "faithfulness per attempt: plain retrieval 0.60, hyde 0.50; none reached the threshold 0.75: "
        "the best attempt's answer (plain retrieval)"
    )
    report.attempt_details[1].error = "timed out"
    report.success, report.strategy = True, "RAG"
    assert report.summary().endswith(
        "plain retrieval 0.60, hyde failed; plain retrieval reached the threshold 0.75"
    )


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("decomposition is off: answered", "decomposition is off for this model (max_depth 0)"),
        ("one question: answered", "one question, nothing to split (this model's preset splits only by rule"),
        (
            "max_depth 2 reached: no documents",
            "deepest level of sub-questions (max_depth 2) was reached; no documents",
        ),
        ("simple query: leaf strategy", "looked simple"),
        ("a comparison: each alternative searched", "a comparison: each alternative searched, then answered"),
    ],
)
def test_recursive_says_why_it_answered_directly(reason: str, said: str) -> None:
    assert said in recursive_reason(reason)
    line = RecursiveRAGResult("An answer.", 0, False, [], [], reason=reason).summary()
    assert (
        line.startswith("answered directly: ")
        and ": answered" not in line
        and "max_depth 0 reached" not in line
    )


def test_a_result_without_an_answer_says_why_in_its_line(capsys) -> None:  # type: ignore[no-untyped-def]
    report = SelfHealingReport(success=False, attempts=1, retries=0, strategy=None, threshold=0.75)
    assert report.summary().startswith("faithfulness per attempt: no attempt; none reached")
    report.no_answer = "no_documents"
    assert report.summary() == "no answer: retrieval found no document to answer from"
    print_result(report)
    assert "\nNo answer: retrieval found no document to answer from\n" in capsys.readouterr().out
    recursive = RecursiveRAGResult("x", 0, False, [], [], reason="one question", no_answer="timeout")
    assert recursive.summary() == "no answer: the query ran out of time"


def test_ask_recursive_line_in_words(capsys, docs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    index = ["--index", str(tmp_path / "index")]
    run(capsys, "index", str(docs), *index, *FAST)
    out = run(capsys, "ask", "Why do volcanoes erupt?", "--llm", "fake", "--strategy", "recursive", *index)[1]
    assert "Answered directly: one question, nothing to split" in out


def test_verbose_lists_every_skipped_file_suffix_filtered_ones_too(capsys, docs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (docs / "empty.txt").write_text("", encoding="utf-8")
    index = ["--index", str(tmp_path / "index")]
    code, out, err = run(capsys, "index", str(docs), *index, *FAST, "-v")
    assert code == 0 and "2 file(s) skipped" in out
    assert f"skipped: {docs / 'photo.png'} (.png: not read inside a folder" in err
    assert f"skipped: {docs / 'empty.txt'} is empty" in err
    quiet = run(capsys, "index", str(docs), "--index", str(tmp_path / "other"), *FAST)
    assert "(-v lists them)" in quiet[1] and "photo.png" not in quiet[2]


# ----------------------------------------------------------------------------- finding 5: small traps


def test_demo_installed_twice_keeps_one_copy_of_the_samples(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "demo"
    demo = [
        "demo",
        "--llm",
        "fake",
        "--index",
        str(target),
        "--questions",
        "1",
        "--strategies",
        "self",
        *FAST,
    ]
    assert run(capsys, *demo)[0] == 0
    once = open_index(target, create=False)
    count, sources = once.count(), sorted(once.sources())
    assert sources and all(s.startswith(commands.DEMO_SOURCE) for s in sources)
    # an older selfrag keyed the samples by the package's absolute path: an install elsewhere
    # added a second copy; the demo now drops such copies and keeps its keyed ones
    old_install = tmp_path / "old-venv" / "selfrag_core" / "data" / "demo"
    old_install.mkdir(parents=True)
    corpus = Path(selfrag_core.__file__).parent / "data" / "demo"
    for path in corpus.iterdir():
        (old_install / path.name).write_bytes(path.read_bytes())
    run(capsys, "index", str(old_install), "--index", str(target))
    assert open_index(target, create=False).count() > count
    assert run(capsys, *demo)[0] == 0
    again = open_index(target, create=False)
    assert again.count() == count and sorted(again.sources()) == sources


def test_serve_has_a_plain_route(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("fastapi")
    from selfrag_core.serve import create_app
    from selfrag_core.testing import FakeLLM, FakeRetriever

    args = build_parser().parse_args(["serve", "--llm", "fake", "--index", str(tmp_path / "i"), *FAST])
    paths = {getattr(route, "path", "") for route in commands.serve_app(args).routes}
    assert {"/query/plain", "/query/self", "/query/adaptive"} <= paths
    default = create_app(rag=FakeRetriever(["Paris is in France."]), llm=FakeLLM())
    assert "/query/plain" in {getattr(route, "path", "") for route in default.routes}


def test_version(capsys) -> None:  # type: ignore[no-untyped-def]
    from selfrag_core import __version__

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"selfrag {__version__}\n"


class _Registered:
    name = "test-embedder-v1"
    dimension = 8

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(len(text) % (i + 2)) + 1.0 for i in range(self.dimension)]


def test_load_opens_a_registered_recorded_embedder_and_says_what_to_pass_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from importlib import metadata

    from selfrag_core.store import RAG, EmbedderMismatchError

    built = RAG(_Registered())
    built.add_documents([{"text": "Honeybees dance to show where flowers are.", "source": "bees"}])
    built.save(tmp_path / "index")
    real = metadata.entry_points

    def entry_points(**kwargs: Any) -> Any:
        if kwargs.get("group") == "selfrag.embedders":
            return [metadata.EntryPoint("test", f"{__name__}:_Registered", "selfrag.embedders")]
        return real(**kwargs)

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    loaded = RAG.load(tmp_path / "index")  # no embed=: the registered embedder of that name
    assert isinstance(loaded.embedder, _Registered) and loaded.retrieve("bees dance", top_k=1)
    monkeypatch.setattr(
        metadata, "entry_points", lambda **kwargs: [] if kwargs.get("group") else real(**kwargs)
    )
    with pytest.raises(
        EmbedderMismatchError, match=r"pass that embedder: RAG\.load\(path, embed=YourEmbeddings"
    ):
        RAG.load(tmp_path / "index")


def test_the_local_minilm_is_registered_under_the_name_it_records() -> None:
    from importlib import metadata

    from selfrag_core.local.embeddings import LocalEmbeddings

    found = {ep.load() for ep in metadata.entry_points(group="selfrag.embedders")}
    assert LocalEmbeddings in found  # RAG.load of a `selfrag index` MiniLM index opens it itself


def test_the_docs_install_one_way() -> None:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    published = [
        str(p.relative_to(ROOT)) for p in pages if "pip install 'selfrag[" in p.read_text(encoding="utf-8")
    ]
    # `pip install -e '.[x]'` everywhere: the package is installed from a clone, not from PyPI
    assert published == [], published
    strategy = (ROOT / "docs" / "how-to" / "choose-a-strategy.md").read_text(encoding="utf-8")
    assert "../shared/" not in strategy and "/work/" not in strategy


def test_cli_module_help_mentions_version() -> None:
    shown = subprocess.run([sys.executable, "-m", "selfrag_core", "--help"], capture_output=True, text=True)
    assert "--version" in shown.stdout
