"""Issue 34's trial on a clean clone: the step lines name a SelfHealingRAG attempt by
strategy, as its summary line does ("attempt 1: plain retrieval", not "attempt 1: RAG"),
and AdaptiveRAG's result says where the router sent the question and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from selfrag_core import cli
from selfrag_core.display import step_text
from selfrag_core.runner import Step
from selfrag_core.types import Answer, Trace, TraceEvent, route_line

pytest.importorskip("bm25s")


def test_step_text_names_attempts_and_verdicts_by_strategy() -> None:
    assert step_text(Step("attempt", "RAG", {"attempt": 1, "strategy": "RAG", "status": "started"})) == (
        "attempt 1: plain retrieval"
    )
    verdict = Step(
        "verdict", "verdict", {"strategy": "HyDERAG", "score": 0.83, "threshold": 0.75, "passed": True}
    )
    assert step_text(verdict) == "verdict on hyde: 0.83 passes the threshold 0.75"
    failed = Step("attempt", "SelfIRAG", {"strategy": "SelfIRAG", "status": "failed"}, error="timed out")
    assert step_text(failed) == "attempt failed (self): timed out"
    other = Step("retrieval", "retrieve", {"query": "Why?", "hits": 2})
    assert step_text(other) == other.text == "retrieved 2 document(s) for 'Why?'"


def test_the_summary_line_tells_each_routing_decision() -> None:
    def route(stage: str, choice: str, reason: str) -> TraceEvent:
        return TraceEvent("decision", "route", detail={"stage": stage, "choice": choice, "reason": reason})

    trace = Trace()
    trace.events += [
        route("before_answer", "plain", "answer plainly first"),
        TraceEvent("llm", "answer"),
        route("after_answer", "healing", "unsupported"),
    ]
    result = Answer("An answer.", [], {"strategy": "healing", "stage": "after_answer"}, trace=trace)
    line = (
        "routed before answering: plain (answer plainly first); after the first answer: healing (unsupported)"
    )
    assert route_line(result.trace) == result.summary() == line
    assert Answer("An answer.", []).summary() == ""  # a strategy of your own without routes: no line


def test_ask_names_the_steps_and_the_route(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "volcano.txt").write_text("Volcanoes erupt when gas pressure breaks the rock.\n")
    (docs / "bees.md").write_text("Honeybees dance to show where flowers are.\n")
    index = ["--index", str(tmp_path / "index")]
    assert cli.main(["index", str(docs), *index, "--embedder", "hashing"]) == 0
    capsys.readouterr()
    question = "Why do volcanoes erupt, and how do honeybees show where flowers are?"
    assert cli.main(["ask", question, *index, "--llm", "fake", "--strategy", "adaptive"]) == 0
    out, err = capsys.readouterr()
    assert "Routed before answering: recursive (" in out, out
    assert cli.main(["ask", "Why do volcanoes erupt?", *index, "--llm", "fake", "--strategy", "healing"]) == 0
    err = capsys.readouterr().err
    assert "- attempt 1: plain retrieval" in err.splitlines(), err
    assert "RAG" not in err, err
