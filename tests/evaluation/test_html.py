"""The HTML report of ``selfrag eval``: structure, escaping, self-containment, determinism."""

from __future__ import annotations

import copy
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from selfrag_core.errors import MissingDependencyError
from selfrag_core.evaluation.html import pareto_front, render_html, write_html

CONTENDERS = ["plain", "self", "hyde", "recursive"]
EVIL = "<script>alert(1)</script> & friends"
METRICS = [
    {"name": "f1", "label": "answer F1", "higher_is_better": True},
    {"name": "em", "label": "exact match", "higher_is_better": True},
    {"name": "recall@10", "label": "recall@10", "higher_is_better": True},
    {"name": "unsupported", "label": "unsupported answers", "higher_is_better": False},
]
F1_MEANS = {"plain": 0.55, "self": 0.7, "hyde": 0.6, "recursive": 0.45}
# timeline rounds (kind, name, duration) per contender
ROUNDS: dict[str, list[tuple[str, str, float]]] = {
    "plain": [("retrieval", "retrieve", 0.05), ("llm", "answer", 1.9)],
    "self": [("retrieval", "retrieve", 0.05), ("llm", "answer", 2.0), ("llm", "evaluate", 1.1)],
    "hyde": [("llm", "hypothesis", 1.2), ("retrieval", "retrieve", 0.06), ("llm", "answer", 2.1)],
    "recursive": [("llm", "decompose", 1.0), ("retrieval", "retrieve", 0.05), ("llm", "answer", 2.2)],
}


def _timeline(contender: str, scale: float) -> list[dict[str, Any]]:
    events, start = [], 0.0
    for kind, name, duration in ROUNDS[contender]:
        events.append({"kind": kind, "name": name, "start_s": start, "latency_s": duration * scale})
        start += duration * scale + 0.01
    return events


def make_report(n_questions: int = 6) -> dict[str, Any]:
    """A realistic ``selfrag.eval/1`` summary: 4 contenders, one error, one null metric, evil text."""
    questions: list[dict[str, Any]] = []
    for i in range(n_questions):
        qid, gold = f"q{i + 1}", f"answer {i + 1}"
        results: dict[str, Any] = {}
        for j, c in enumerate(CONTENDERS):
            good = (i + j) % 3 != 0
            results[c] = {
                "answer": gold if good else f"I think it is {i + j} & more",
                "error": None,
                "sources": [
                    {"id": f"doc{i}", "title": f"Title {i}", "text": f"Document {i} says {gold}."},
                    {"id": f"doc{i + 10}", "title": "Other", "text": "Unrelated 'quoted' \"text\" <b>."},
                ],
                "metrics": {"f1": 1.0 if good else 0.25, "em": 1.0 if good else 0.0, "recall@10": 1.0},
                "llm_calls": len([r for r in ROUNDS[c] if r[0] == "llm"]),
                "input_tokens": 300 + 100 * j,
                "output_tokens": 20 + j,
                "latency_s": 2.0 + j + 0.1 * i,
                "fallbacks": ["judge_unparsed"] if c == "self" and i == 2 else [],
                "timeline": _timeline(c, 1.0 + 0.1 * i),
            }
        questions.append(
            {
                "id": qid,
                "question": f"What is item {i + 1}?" + " very long" * (20 if i == 0 else 0),
                "answers": [gold],
                "relevant": [f"doc{i}"],
                "results": results,
            }
        )
    questions[1]["results"]["self"]["answer"] = EVIL
    failed = questions[3]["results"]["hyde"]
    failed.update(answer="", error="LLMCallError: every attempt failed", sources=[], metrics={}, llm_calls=1)
    failed["timeline"] = failed["timeline"][:1]
    questions[4]["results"]["recursive"]["metrics"]["f1"] = None

    summary: dict[str, Any] = {}
    for j, c in enumerate(CONTENDERS):
        means: dict[str, dict[str, Any]] = {
            "f1": {"mean": F1_MEANS[c], "n": n_questions},
            "em": {"mean": 0.4 + 0.05 * j, "n": n_questions},
            "recall@10": {"mean": 1.0, "n": n_questions},
            "unsupported": {"mean": 0.3 - 0.05 * j, "n": n_questions},
        }
        if c == "recursive":
            means["em"]["mean"] = None
        summary[c] = {
            "metrics": means,
            "llm_calls": float(len([r for r in ROUNDS[c] if r[0] == "llm"])),
            "input_tokens": 300.0 + 100 * j,
            "output_tokens": None if c == "hyde" else 20.0 + j,
            "latency_p50": 2.0 + j,
            "latency_p95": 3.5 + j,
            "fallbacks": 1 if c == "self" else 0,
            "errors": 1 if c == "hyde" else 0,
            "questions": n_questions,
        }
    # (low, high) of the paired f1 difference to plain: above, across and below zero
    intervals = {"self": (0.04, 0.26), "hyde": (-0.06, 0.16), "recursive": (-0.2, -0.013)}
    verdicts = {"self": "better", "hyde": "no detectable difference", "recursive": "worse"}
    comparisons = {
        c: {
            "f1": {
                "mean": F1_MEANS[c] - F1_MEANS["plain"],
                "low": intervals[c][0],
                "high": intervals[c][1],
                "n": n_questions,
                "confidence": 0.95,
                "verdict": verdicts[c],
            },
            "em": {
                "mean": 0.05,
                "low": -0.02,
                "high": 0.12,
                "n": n_questions,
                "confidence": 0.95,
                "verdict": "no detectable difference",
            },
        }
        for c in CONTENDERS[1:]
    }
    return {
        "schema": "selfrag.eval/1",
        "name": "xquad.en",
        "created": "2026-12-01T10:00:00Z",
        "settings": {"k": 10, "llm": "smollm2", "limit": 60, "seed": 0, "concurrency": 2, "replay": False},
        "baseline": "plain",
        "contenders": CONTENDERS,
        "metrics": [*METRICS, {"name": "mrr", "label": "MRR", "higher_is_better": True}],  # no values
        "summary": summary,
        "comparisons": comparisons,
        "questions": questions,
        "problems": [{"where": "questions.jsonl:12", "message": "unknown field 'answer' & <skipped>"}],
    }


class Page(HTMLParser):
    """Collects the elements, attributes and text of a page, and per <details> its text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.details: list[dict[str, Any]] = []  # {"text": str, "svgs": int}
        self.table_text: dict[str, str] = {}
        self.text: list[str] = []
        self._open_details = False
        self._tables: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)
        classes = (dict(attrs).get("class") or "").split()
        if tag == "details" and "q" in classes:
            self._open_details = True
            self.details.append({"text": "", "svgs": 0})
        if tag == "svg" and self._open_details:
            self.details[-1]["svgs"] += 1
        if tag == "table":
            self._tables.append(classes[0] if classes else "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self._open_details = False
        if tag == "table" and self._tables:
            self._tables.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._open_details:
            self.details[-1]["text"] += data
        for table in self._tables:
            self.table_text[table] = self.table_text.get(table, "") + data


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return make_report()


@pytest.fixture(scope="module")
def page(report: dict[str, Any]) -> tuple[str, Page]:
    text = render_html(report)
    return text, Page(text)


def _expected_svgs(quality_metrics: int, timelines: int, differences: int = 1) -> int:
    # the differences figure (with a contender besides the baseline), a quality-versus-cost
    # figure and a distribution figure per metric that tells the contenders apart, a
    # distribution figure for latency and one for LLM calls, a timeline per question
    return differences + 2 * quality_metrics + 2 + timelines


def test_page_structure_and_figure_count(page: tuple[str, Page], report: dict[str, Any]) -> None:
    text, parsed = page
    assert text.startswith("<!DOCTYPE html>")
    assert parsed.tags.count("html") == 1
    # f1, em, unsupported have means; recall@10 is 1 for every answer (one line); mrr has none
    assert parsed.tags.count("svg") == _expected_svgs(3, len(report["questions"]))
    assert "mrr" not in "".join(parsed.table_text.values())
    assert (
        "recall@10" not in parsed.table_text["summary"]
        and "recall@10" not in parsed.table_text["differences"]
    )
    # so are the counts equal for every contender: said once, not a column each
    said = re.search(
        r"The same for every contender: recall@10 1\.000 \(every answer\)[^.]*\.", "".join(parsed.text)
    )
    assert said and f"questions {len(report['questions'])}" in said.group()
    assert "questions" not in parsed.table_text["summary"] and "errors" in parsed.table_text["summary"]
    assert "measured" not in said.group()  # unknown for every contender (an older report): not said
    assert all(d["svgs"] == 1 for d in parsed.details)


def test_one_details_per_question_with_every_answer(page: tuple[str, Page], report: dict[str, Any]) -> None:
    _, parsed = page
    assert len(parsed.details) == len(report["questions"])
    for question, details in zip(report["questions"], parsed.details, strict=True):
        assert question["id"] in details["text"]
        for contender, result in question["results"].items():
            assert contender in details["text"]
            assert result["answer"] in details["text"]  # the parser unescapes the text
    assert "LLMCallError: every attempt failed" in parsed.details[3]["text"]
    assert "fallback: judge_unparsed" in parsed.details[2]["text"]
    assert "doc1 ✓ relevant" in parsed.details[1]["text"]


def test_untrusted_text_is_escaped(page: tuple[str, Page]) -> None:
    text, parsed = page
    assert "script" not in parsed.tags
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; friends" in text
    assert EVIL in "".join(parsed.text)
    assert "unknown field 'answer' & <skipped>" in "".join(parsed.text)  # problems, escaped too


def test_page_is_self_contained(page: tuple[str, Page]) -> None:
    text, parsed = page
    for name, value in parsed.attrs:
        if name in ("src", "href", "xlink:href", "action", "srcset"):
            assert value is not None
            assert not value.lower().startswith(("http:", "https:", "//")), (name, value)
            assert "://" not in value
    assert "link" not in parsed.tags and "img" not in parsed.tags and "iframe" not in parsed.tags
    assert "<!DOCTYPE svg" not in text and "<?xml" not in text
    assert "url(http" not in text and "@import" not in text
    assert "http:" not in text and "https:" not in text  # not even the SVG namespaces
    assert parsed.tags.count("svg") == text.count('<svg role="img" aria-label="')


def test_svg_ids_are_unique_in_the_page(page: tuple[str, Page]) -> None:
    _, parsed = page
    ids = [value for name, value in parsed.attrs if name == "id"]
    assert ids and len(ids) == len(set(ids))


def test_the_differences_table_shows_each_difference_on_one_line(page: tuple[str, Page]) -> None:
    text, parsed = page
    table = parsed.table_text["differences"]
    assert "+0.150 [+0.040, +0.260] better" in table  # self's f1
    assert "-0.100 [-0.200, -0.013] worse" in table  # recursive's f1
    assert "+0.050 [-0.020, +0.120] –" in table  # no detectable difference: no word, grey
    assert "title='+0.050 (95% CI -0.020 … +0.120, n=6): no detectable difference'" in text
    assert "class='num v-better'" in text and "class='num v-worse'" in text and "class='num v-none'" in text
    assert 'aria-label="paired differences from plain with 95% intervals"' in text
    summary = parsed.table_text["summary"]
    assert "plain (baseline)" in summary
    assert "n/a" in summary  # recursive's null em mean, hyde's unknown output tokens
    assert "0.550" in summary  # plain's f1 mean


def test_quality_versus_cost_names_the_pareto_front(page: tuple[str, Page]) -> None:
    text, _ = page
    # f1: plain 0.55, self 0.7, hyde 0.6, recursive 0.45; LLM calls: plain 1, the others 2;
    # latency p50: plain 2, self 3, hyde 4, recursive 5
    assert (
        "Pareto front (not dominated) by LLM calls per question: plain, self;"
        " by latency p50 (s): plain, self." in text
    )
    # unsupported answers (lower is better): plain 0.3, self 0.25, hyde 0.2, recursive 0.15
    assert (
        "by LLM calls per question: plain, recursive; by latency p50 (s): plain, self, hyde, recursive."
        in text
    )


@pytest.fixture(scope="module")
def two_timelines(report: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_html(report, tmp_path_factory.mktemp("html") / "report.html", max_timelines=2)


def test_max_timelines_leaves_the_rest_out(two_timelines: Path) -> None:
    parsed = Page(two_timelines.read_text(encoding="utf-8"))
    assert [d["svgs"] for d in parsed.details] == [1, 1, 0, 0, 0, 0]
    assert parsed.tags.count("svg") == _expected_svgs(3, 2)
    notes = [d for d in parsed.details if "Timeline left out" in d["text"]]
    assert len(notes) == 4


def test_missing_metrics_comparisons_and_values_render(report: dict[str, Any]) -> None:
    bare = copy.deepcopy(report)
    bare["metrics"], bare["comparisons"], bare["problems"] = [], {}, []
    for question in bare["questions"]:
        for result in question["results"].values():
            result.update(metrics={}, latency_s=None, llm_calls=None, timeline=[], sources=None)
    for entry in bare["summary"].values():
        entry.update(metrics={}, llm_calls=None, latency_p50=None)
    parsed = Page(render_html(bare))
    assert parsed.tags.count("svg") == _expected_svgs(0, 0)  # latency and LLM calls, empty
    assert len(parsed.details) == len(bare["questions"])
    assert "differences" not in parsed.table_text or "[" not in parsed.table_text["differences"]


def test_a_nearly_empty_report_renders() -> None:
    parsed = Page(render_html({"schema": "selfrag.eval/1", "contenders": ["plain"], "summary": None}))
    assert parsed.tags.count("svg") == 2
    assert parsed.details == []


def test_rendering_is_deterministic(report: dict[str, Any], page: tuple[str, Page]) -> None:
    assert render_html(copy.deepcopy(report)) == page[0]


def test_write_html_writes_the_page(report: dict[str, Any], page: tuple[str, Page], tmp_path: Path) -> None:
    path = write_html(report, str(tmp_path / "report.html"))
    assert path == tmp_path / "report.html"
    assert path.read_text(encoding="utf-8") == page[0]


def test_without_matplotlib_the_error_names_the_extra(
    report: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingDependencyError, match=re.escape("pip install 'selfrag[eval]'")):
        render_html(report)


@pytest.mark.parametrize(
    ("points", "higher_is_better", "expected"),
    [
        ([], True, []),
        ([("a", 1.0, 0.5)], True, ["a"]),
        # b is cheaper and better than c; a is cheapest; d is best
        ([("a", 1.0, 0.3), ("b", 2.0, 0.6), ("c", 3.0, 0.5), ("d", 4.0, 0.9)], True, ["a", "b", "d"]),
        # equal points do not dominate each other
        ([("a", 1.0, 0.5), ("b", 1.0, 0.5), ("c", 2.0, 0.4)], True, ["a", "b"]),
        # same cost, better quality dominates; same quality, lower cost dominates
        ([("a", 1.0, 0.5), ("b", 1.0, 0.7), ("c", 0.5, 0.7)], True, ["c"]),
        ([("a", 2.0, 0.5), ("b", 1.0, 0.5)], True, ["b"]),
        # lower is better: the fewest unsupported answers win
        ([("a", 1.0, 0.3), ("b", 2.0, 0.1), ("c", 3.0, 0.2)], False, ["a", "b"]),
        ([("a", 1.0, 0.3), ("b", 2.0, 0.1), ("c", 3.0, 0.2)], True, ["a"]),
    ],
)
def test_pareto_front(
    points: list[tuple[str, float, float]], higher_is_better: bool, expected: list[str]
) -> None:
    assert pareto_front(points, higher_is_better) == expected
