"""Garbage in the files ``selfrag eval`` reads: a baseline run (``results.jsonl``, its
``summary.json``), a router file and the questions. Truncated, deeply nested, wrong-typed,
huge or not UTF-8, each is one :class:`ConfigurationError` naming the file (and the line),
from the loader and as ``selfrag: error: ...`` and exit 2 from the command line; never a
traceback. A deterministic fuzz table: every case is written out as it is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import ConfigurationError
from selfrag_core.cli import main
from selfrag_core.evaluation import load_questions
from selfrag_core.evaluation.gate import read_run
from selfrag_core.evaluation.router import fit_router
from selfrag_core.strategies.adaptive import SIGNALS, load_router

DEEP_ARRAYS = "[" * 100_000 + "]" * 100_000
DEEP_OBJECTS = '{"a": ' * 100_000 + "0" + "}" * 100_000
LONG_INT = "7" * 5_000  # past Python's 4300-digit limit
NOT_UTF8 = b'{"id": "c1", "question": "caf\xe9"}\n'
HUGE = "x" * 2_000_000


@dataclass(frozen=True)
class Case:
    """``files`` (path under the test's folder -> content) read as ``kind`` from ``target``;
    the message must name ``where``."""

    kind: str  # "baseline" (a run's folder), "router" (a router file) or "questions"
    files: dict[str, str | bytes]
    target: str
    where: str


def line(**fields: Any) -> str:
    return json.dumps(fields)


def result(qid: str, f1: Any = 1.0) -> str:
    return line(id=qid, question=f"What is the capital of {qid}?", results={"plain": {"metrics": {"f1": f1}}})


GOOD_RESULTS = "".join(result(f"c{i}") + "\n" for i in range(6))
GOOD_SUMMARY = json.dumps({"metrics": [{"name": "f1", "label": "F1", "higher_is_better": True}]})
_LOGISTIC = {"signals": {"parts": {"mean": 1.0, "scale": 1.0, "weight": 0.5}}, "bias": 0.0}
_STAGES = {"before_answer": _LOGISTIC, "after_answer": _LOGISTIC}
_MODEL = {"better": _STAGES, "worse": _STAGES, "gain": 0.1, "loss": 0.1, "calls": {"single": 2.0}}
GOOD_ROUTER: dict[str, Any] = {"schema": "selfrag.router/1", "metric": "f1", "strategies": {"hyde": _MODEL}}


def router(**changes: Any) -> str:
    return json.dumps({**GOOD_ROUTER, **changes})


def model(**changes: Any) -> str:
    return router(strategies={"hyde": {**_MODEL, **changes}})


def baseline(second_line: str | bytes) -> Case:
    """A run whose results.jsonl has a good first line and ``second_line``."""
    content = (
        result("c0").encode() + b"\n" + second_line
        if isinstance(second_line, bytes)
        else result("c0") + "\n" + second_line + "\n"
    )
    where = "results.jsonl" if isinstance(second_line, bytes) else "results.jsonl:2:"
    return Case("baseline", {"run/results.jsonl": content}, "run", where)


def summary(content: str | bytes) -> Case:
    return Case(
        "baseline", {"run/results.jsonl": GOOD_RESULTS, "run/summary.json": content}, "run", "summary.json"
    )


def router_file(content: str | bytes) -> Case:
    return Case("router", {"router.json": content}, "router.json", "router.json")


def questions(content: str | bytes, name: str = "q.jsonl") -> Case:
    return Case("questions", {name: content}, name, name)


def beir(**files: str) -> Case:
    where = next(iter(files)).replace("__", "/")  # the file at fault, named first
    folder = {"corpus.jsonl": line(_id="d0", text="Paris is in France.") + "\n", "queries.jsonl":
              line(_id="c0", text="Where is Paris?") + "\n", "qrels/test.tsv": "c0\td0\t1\n"}  # fmt: skip
    folder.update({name.replace("__", "/"): text for name, text in files.items()})
    return Case("questions", {f"beir/{name}": text for name, text in folder.items()}, "beir", where)


#: a SQuAD paragraph whose one question's answers are a string, not a list of objects
PARAGRAPH = {
    "context": "Paris is in France.",
    "qas": [{"id": "q1", "question": "Where?", "answers": "France"}],
}


def squad(data: Any) -> Case:
    return questions(json.dumps({"data": data}), "squad.json")


CASES = {
    # a baseline run's results.jsonl: every line is one that selfrag eval writes, or an error
    "results/empty": Case("baseline", {"run/results.jsonl": ""}, "run", "holds no results"),
    "results/blank lines": Case("baseline", {"run/results.jsonl": "\n  \n\n"}, "run", "holds no results"),
    "results/truncated": baseline(result("c1")[:40]),
    "results/deep arrays": baseline(DEEP_ARRAYS),
    "results/deep objects": baseline(DEEP_OBJECTS),
    "results/deep in a field": baseline(
        '{"id": "c1", "results": {"plain": {"metrics": ' + DEEP_ARRAYS + "}}}"
    ),
    "results/long integer": baseline('{"id": ' + LONG_INT + ', "results": {}}'),
    "results/huge line": baseline(HUGE),
    "results/not utf-8": baseline(NOT_UTF8),
    "results/an array": baseline("[1, 2]"),
    "results/a string": baseline('"c1"'),
    "results/null": baseline("null"),
    "results/no id": baseline(line(results={"plain": {"metrics": {}}})),
    "results/id a list": baseline(line(id=["c1"], results={})),
    "results/id a boolean": baseline(line(id=True, results={})),
    "results/no results": baseline(line(id="c1")),
    "results/results a string": baseline(line(id="c1", results="plain")),
    "results/results a list": baseline(line(id="c1", results=[{"metrics": {}}])),
    "results/record a string": baseline(line(id="c1", results={"plain": "oops"})),
    "results/record a number": baseline(line(id="c1", results={"plain": 0.5})),
    "results/record null": baseline(line(id="c1", results={"plain": None})),
    "results/metrics a string": baseline(line(id="c1", results={"plain": {"metrics": "oops"}})),
    "results/metrics a list": baseline(line(id="c1", results={"plain": {"metrics": [["f1", 1.0]]}})),
    "results/metrics a number": baseline(line(id="c1", results={"plain": {"metrics": 1}})),
    "results/huge contender": baseline(line(id="c1", results={HUGE: "oops"})),
    # the summary.json beside a good results.jsonl: read for which way each metric is better
    "summary/empty": summary(""),
    "summary/truncated": summary(GOOD_SUMMARY[:30]),
    "summary/deep arrays": summary(DEEP_ARRAYS),
    "summary/deep objects": summary(DEEP_OBJECTS),
    "summary/deep metrics": summary('{"metrics": ' + DEEP_ARRAYS + "}"),
    "summary/long integer": summary('{"metrics": [], "created": ' + LONG_INT + "}"),
    "summary/huge": summary('{"metrics": "' + HUGE),
    "summary/not utf-8": summary(b'{"name": "caf\xe9"}'),
    "summary/an array": summary("[]"),
    "summary/a string": summary('"summary"'),
    "summary/metrics a string": summary('{"metrics": "f1"}'),
    "summary/metrics an object": summary('{"metrics": {"f1": true}}'),
    "summary/metrics strings": summary('{"metrics": ["f1"]}'),
    "summary/metric without direction": summary('{"metrics": [{"name": "f1"}]}'),
    "summary/metric named by a number": summary('{"metrics": [{"name": 1, "higher_is_better": true}]}'),
    "summary/direction a string": summary('{"metrics": [{"name": "f1", "higher_is_better": "yes"}]}'),
    # a router file (--router)
    "router/empty": router_file(""),
    "router/truncated": router_file(router()[:50]),
    "router/deep arrays": router_file(DEEP_ARRAYS),
    "router/deep objects": router_file(DEEP_OBJECTS),
    "router/deep in a field": router_file(router()[:-1] + ', "info": ' + DEEP_ARRAYS + "}"),
    "router/long integer": router_file(router()[:-1] + ', "min_gain_per_call": ' + LONG_INT + "}"),
    "router/huge": router_file(router(metric=HUGE, strategies={})),
    "router/huge schema": router_file(router(schema=HUGE)),
    "router/not utf-8": router_file(b'{"schema": "caf\xe9"}'),
    "router/an array": router_file("[]"),
    "router/null": router_file("null"),
    "router/another schema": router_file(router(schema="selfrag.router/0")),
    "router/metric a number": router_file(router(metric=1)),
    "router/strategies a string": router_file(router(strategies="hyde")),
    "router/strategy a string": router_file(router(strategies={"hyde": "oops"})),
    "router/a stage missing": router_file(model(better={"before_answer": _LOGISTIC})),
    "router/a weight a string": router_file(model().replace('"weight": 0.5', '"weight": "x"')),
    "router/gain infinite": router_file(model().replace('"gain": 0.1', '"gain": 1e999')),
    "router/gain NaN": router_file(model().replace('"gain": 0.1', '"gain": NaN')),
    "router/calls a list": router_file(model(calls=[2.0])),
    "router/info a string": router_file(router(info="fitted")),
    # the questions: JSONL, SQuAD JSON and BEIR folders with no valid question
    "questions/empty": questions(""),
    "questions/truncated": questions('{"question": "What is the capital'),
    "questions/deep arrays": questions(DEEP_ARRAYS),
    "questions/deep objects": questions(DEEP_OBJECTS),
    "questions/deep in a field": questions('{"question": "Where?", "answers": ' + DEEP_ARRAYS + "}"),
    "questions/long integer id": questions('{"id": ' + LONG_INT + ', "question": "Where?"}'),
    "questions/huge line": questions(HUGE),
    "questions/not utf-8": questions(NOT_UTF8),
    "questions/an array": questions('["Where?"]'),
    "questions/null": questions("null"),
    "questions/question a number": questions(line(question=7)),
    "questions/answers a number": questions(line(question="Where?", answers=7)),
    "questions/relevant a string": questions(line(question="Where?", relevant="d1")),
    "questions/grades strings": questions(line(question="Where?", relevant={"d1": "high"})),
    "questions/id a list": questions(line(id=["c1"], question="Where?")),
    "questions/huge answer string": questions(line(question="Where?", answers=HUGE)),
    "questions/huge unknown field": questions(json.dumps({"question": "Where?", HUGE: 1})),
    "questions/json deep arrays": questions(DEEP_ARRAYS, "q.json"),
    "questions/json truncated": questions('{"data": [{"title": "Paris", "paragraphs": [', "q.json"),
    "squad/data a string": squad("articles"),
    "squad/articles numbers": squad([1, 2]),
    "squad/paragraphs a string": squad([{"title": "Paris", "paragraphs": "p"}]),
    "squad/answers a string": squad([{"title": "Paris", "paragraphs": [PARAGRAPH]}]),
    "squad/deep data": questions('{"data": [' + DEEP_ARRAYS + "]}", "squad.json"),
    "beir/queries deep": beir(**{"queries.jsonl": DEEP_OBJECTS}),
    "beir/queries text a list": beir(**{"queries.jsonl": line(_id="c0", text=["Where?"])}),
    "beir/corpus truncated": beir(**{"corpus.jsonl": '{"_id": "d0", "text": "Par'}),
    "beir/qrels two columns": beir(**{"qrels__test.tsv": "c0\td0\n"}),
}


#: cases whose message echoes the huge value back (the router file's loader, strategies/adaptive.py)
ECHOED = {"router/huge schema"}
PARAMS = [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="load_router echoes the schema whole"))
    if name in ECHOED
    else name
    for name in CASES
]


@pytest.fixture
def case(request: Any, tmp_path: Path) -> Case:
    found: Case = CASES[request.param]
    for name, content in found.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return found


def load(case: Case, target: Path) -> Any:
    if case.kind == "baseline":
        return read_run(target)
    if case.kind == "router":
        return load_router(target)
    return load_questions(target)


@pytest.mark.parametrize("case", PARAMS, indirect=True)
def test_the_loader_raises_one_configuration_error_naming_the_file(case: Case, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load(case, tmp_path / case.target)
    message = str(caught.value)
    assert case.where in message and "\n" not in message
    assert len(message) < 1_000  # a huge input is not echoed back
    if case.kind == "baseline" and "summary" not in case.where:  # the router reads the same results
        with pytest.raises(ConfigurationError):
            fit_router(tmp_path / case.target)


@pytest.fixture
def eval_args(tmp_path: Path) -> list[str]:
    """``selfrag eval`` on six good questions and their corpus, the fake model, no cache."""
    (tmp_path / "good.jsonl").write_text(
        "".join(line(id=f"c{i}", question=f"What is the capital of c{i}?", answers=[f"city{i}"]) + "\n"
                for i in range(6))
    )  # fmt: skip
    (tmp_path / "corpus.jsonl").write_text(
        "".join(line(_id=f"c{i}", text=f"The capital of c{i} is city{i}.") + "\n" for i in range(6))
    )
    return ["--corpus", str(tmp_path / "corpus.jsonl"), "--llm", "fake", "--embedder", "none", "--no-cache",
            "--plain", "--out", str(tmp_path / "out")]  # fmt: skip


@pytest.mark.parametrize("case", PARAMS, indirect=True)
def test_the_command_line_exits_2_with_one_line_naming_the_file(
    case: Case, tmp_path: Path, eval_args: list[str], capsys: Any
) -> None:
    target = str(tmp_path / case.target)
    good = str(tmp_path / "good.jsonl")
    argv = {
        "baseline": ["eval", good, *eval_args, "--strategies", "plain", "--baseline", target],
        "router": [
            "eval",
            good,
            *eval_args,
            "--strategies",
            "plain,adaptive",
            "--router",
            target,
            "--dry-run",
        ],
        "questions": ["eval", target, *eval_args, "--dry-run"],
    }[case.kind]
    assert main(argv) == 2
    captured = capsys.readouterr()
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("selfrag: error: ") and case.where in error and len(error) < 1_000
    if case.kind == "baseline":  # a baseline the gate cannot read stops the run before it starts
        assert not (tmp_path / "out").exists() and captured.out == ""


def test_a_huge_bad_line_among_good_ones_is_skipped_without_being_echoed(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(line(id=HUGE, question="Where?") + "\n" + line(id=HUGE, question="Where else?") + "\n")
    [problem] = load_questions(path).problems
    assert problem.where == "q.jsonl:2" and "duplicate id" in problem.message and len(problem.message) < 1_000


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), True])
def test_a_run_whose_routing_signals_are_not_finite_numbers_is_not_fitted_on(
    tmp_path: Path, bad: Any
) -> None:
    signals = {**dict.fromkeys(SIGNALS, 1.0), "parts": bad}
    records = {"plain": {"metrics": {"f1": 0.5}, "signals": signals}, "hyde": {"metrics": {"f1": 1.0}}}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").write_text(
        "".join(line(id=f"c{i}", results=records) + "\n" for i in range(8))
    )
    with pytest.raises(ConfigurationError, match="0 question"):  # not a router of NaN weights
        fit_router(tmp_path / "run")
