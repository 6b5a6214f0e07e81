"""``evaluate`` and ``selfrag eval`` end to end with scripted LLMs: metrics against
hand-computed values, verdicts, contenders that fail, record and replay, retrieval-only
runs, interrupted runs, and the files written."""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from test_data import DEEP, TOO_DEEP, deny_reading

from selfrag_core import SMALL_LOCAL, ConfigurationError, HyDERAGConfig
from selfrag_core.cli import main
from selfrag_core.evaluation import EvalData, EvalQuestion, EvalSettings, evaluate, load_jsonl
from selfrag_core.replay import CacheMissError
from selfrag_core.testing import FakeLLM
from selfrag_core.types import Answer, RetrievedDoc

pytest.importorskip("bm25s")

PLACES = {
    "lion": "Kenya", "penguin": "Antarctica", "kangaroo": "Australia", "panda": "China",
    "jaguar": "Brazil", "moose": "Canada", "camel": "Egypt", "tiger": "India",
    "kiwi": "Zealand", "lemur": "Madagascar", "yak": "Tibet", "bison": "Montana",
}  # fmt: skip
ANIMALS = list(PLACES)


def write_data(folder: Path) -> tuple[Path, Path]:
    corpus = folder / "corpus.jsonl"
    questions = folder / "questions.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"_id": f"d{i}", "title": a, "text": f"The {a} lives in {p}."}) + "\n"
            for i, (a, p) in enumerate(PLACES.items())
        )
    )
    questions.write_text(
        "".join(
            json.dumps(
                {"id": a, "question": f"Where does the {a} live?", "answers": [p], "relevant": [f"d{i}"]}
            )
            + "\n"
            for i, (a, p) in enumerate(PLACES.items())
        )
    )
    return questions, corpus


def reader() -> FakeLLM:
    """Answers with the last word of the first document of its prompt: the right place
    when retrieval put the right document first."""

    def answer(prompt: str) -> str:
        found = re.search(r"lives in (\w+)\.", prompt)
        return found.group(1) if found else "unknown"

    return FakeLLM(answer)


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    return write_data(tmp_path)


def run(
    data: tuple[Path, Path],
    contenders: Any,
    *,
    llm: Any = None,
    judge: Any = None,
    progress: Any = None,
    **settings: Any,
) -> Any:
    """``evaluate`` on the data's questions and corpus, the lexical index, ``settings``
    the fields of its :class:`EvalSettings`."""
    questions, corpus = data
    how = EvalSettings(embed="none", **settings)
    return evaluate(
        questions, contenders, llm=llm, corpus=corpus, judge=judge, progress=progress, settings=how
    )


def test_metrics_and_verdicts_against_hand_computed_values(data: tuple[Path, Path]) -> None:
    report = run(data, {"plain": "plain", "clueless": lambda q: "I do not know"}, llm=reader())
    summary = report.summary()
    plain, clueless = summary["plain"]["metrics"], summary["clueless"]["metrics"]
    # plain: BM25 puts the one document naming the animal first, and the reader reads it
    assert plain["f1"] == {"mean": 1.0, "n": 12} and plain["em"]["mean"] == 1.0
    assert plain["recall@10"]["mean"] == plain["mrr"]["mean"] == plain["ndcg@10"]["mean"] == 1.0
    # "I do not know": no token in common with any place, no documents
    assert clueless["f1"]["mean"] == 0.0 and clueless["recall@10"]["mean"] == 0.0
    assert summary["plain"]["llm_calls"] == 1.0 and summary["clueless"]["llm_calls"] is None  # unknown, not 0
    diff = report.comparisons()["clueless"]
    assert diff["f1"]["mean"] == -1.0 and diff["f1"]["verdict"] == "worse"
    assert diff["recall@10"]["verdict"] == "worse"
    assert "llm_calls" not in diff  # unknown for an outside contender: nothing to compare
    assert "plain" not in report.comparisons()


def test_partial_answers_give_the_squad_f1() -> None:
    questions = EvalData("tiny", [EvalQuestion("q1", "Where does the lion live?", ("Kenya",))])
    answers = {"half": "Kenya and Tanzania", "plain": "Kenya"}
    report = evaluate(questions, {k: (lambda q, a=a: a) for k, a in answers.items()})
    # "kenya and tanzania" vs "kenya": precision 1/3, recall 1 -> F1 = 2 * (1/3) / (4/3) = 0.5
    assert report.summary()["half"]["metrics"]["f1"]["mean"] == pytest.approx(0.5)
    assert report.summary()["half"]["metrics"]["em"]["mean"] == 0.0


def test_gold_in_answer_flows_to_the_summary_comparisons_table_and_files(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    wrong = {"lion", "penguin", "kangaroo"}  # "Kenyan": the gold is only part of a token

    def verbose(question: str) -> str:
        animal, place = next((a, p) for a, p in PLACES.items() if f" {a} " in question)
        return f"The {animal} lives in {place}{'n' if animal in wrong else ''}."

    out = tmp_path / "out"
    contenders = {"plain": "plain", "verbose": verbose, "clueless": lambda q: "I do not know"}
    report = run(data, contenders, llm=reader(), output=out)
    assert [m.name for m in report.metrics][:3] == ["f1", "em", "gold_in_answer"]
    summary = report.summary()
    assert summary["plain"]["metrics"]["gold_in_answer"] == {"mean": 1.0, "n": 12}  # the answer is the gold
    verbose_metrics = summary["verbose"]["metrics"]
    # 9 of 12 sentences hold the place as a token; none equals it; "lion lives in kenya"
    # vs "kenya": P = 1/4, R = 1, F1 = 0.4 on those 9, 0 on the 3 others -> 0.3
    assert verbose_metrics["gold_in_answer"] == {"mean": 0.75, "n": 12}
    assert verbose_metrics["em"]["mean"] == 0.0 and verbose_metrics["f1"]["mean"] == pytest.approx(0.3)
    assert summary["clueless"]["metrics"]["gold_in_answer"] == {"mean": 0.0, "n": 12}
    comparisons = report.comparisons()
    assert comparisons["verbose"]["gold_in_answer"]["mean"] == -0.25
    assert comparisons["verbose"]["gold_in_answer"]["n"] == 12
    assert comparisons["verbose"]["em"]["verdict"] == "worse"
    clueless = comparisons["clueless"]["gold_in_answer"]
    assert clueless["mean"] == -1.0 and clueless["verdict"] == "worse"
    # the table: a column after em, and a comparison row per contender
    table = report.table()
    header = table.splitlines()[1].split()
    assert header[header.index("em") + 1] == "gold_in_answer"
    assert re.search(r"verbose\s+gold_in_answer\s+-0\.250", table)
    assert re.search(r"clueless\s+gold_in_answer\s+-1\.000\s+\[-1\.000, -1\.000\]\s+12\s+worse", table)
    written = json.loads((out / "summary.json").read_text())
    gold_info = {"name": "gold_in_answer", "label": "gold answer in the answer", "higher_is_better": True}
    assert gold_info in written["metrics"]
    assert written["summary"]["verbose"]["metrics"]["gold_in_answer"]["mean"] == 0.75
    assert written["comparisons"]["clueless"]["gold_in_answer"]["verdict"] == "worse"
    if (out / "report.html").exists():  # with matplotlib
        assert "gold answer in the answer" in (out / "report.html").read_text()


def test_a_contender_that_raises_is_counted_and_the_others_still_run(data: tuple[Path, Path]) -> None:
    def flaky(question: str) -> str:
        if "lion" in question:
            raise ValueError("backend down")
        return next(place for animal, place in PLACES.items() if animal in question)

    report = run(data, {"plain": "plain", "flaky": flaky}, llm=reader())
    assert report.summary()["flaky"]["errors"] == 1 and report.summary()["flaky"]["questions"] == 12
    lion = report.to_dict()["questions"][0]["results"]["flaky"]
    assert lion["error"] == "flaky: ValueError: backend down" and lion["answer"] == ""
    assert lion["metrics"]["f1"] == 0.0  # a failure scores as a wrong answer, not as missing
    assert lion["metrics"]["gold_in_answer"] == 0.0
    assert report.summary()["flaky"]["metrics"]["em"]["mean"] == pytest.approx(11 / 12)


class Message:
    """A chat message as LangChain's look: ``content``, a string or content blocks."""

    def __init__(self, content: Any) -> None:
        self.content = content


class Response:
    """A LlamaIndex ``Response``: ``response`` (a string, or None) and ``source_nodes``,
    of LlamaIndex's package (``selfrag_core.frameworks`` recognises it by its package)."""

    __module__ = "llama_index.core.base.response.schema"

    def __init__(self, response: str | None, source_nodes: list[Any] | None = None) -> None:
        self.response, self.source_nodes = response, source_nodes or []


CAPITAL = EvalData("capital", [EvalQuestion("q1", "What is the capital of France?", ("Paris",))])
PARIS = RetrievedDoc("Paris is the capital of France.", metadata={"source": "paris.md"})


@pytest.mark.parametrize(
    ("output", "described"),
    [
        (b"Paris", "returned bytes b'Paris'"),
        (["Paris"], "returned list ['Paris']"),
        (object(), "returned object <object"),
        (None, "returned None"),
        ({}, "returned a dict without an answer (its keys: none)"),
        (
            {"text": "Paris", "context": [PARIS]},
            "returned a dict without an answer (its keys: 'text', 'context')",
        ),
        ({"answer": None, "result": "Paris"}, "returned a dict whose 'answer' is None"),
        ({"output": ["Paris"]}, "returned a dict whose 'output' is list ['Paris']"),
        (Message(None), "returned Message <"),
        (Message([{"type": "image_url", "image_url": "x"}]), "returned Message <"),
        (Response(None, [PARIS]), "returned a Response whose .response is None"),
        (Answer(b"Paris", [PARIS]), "returned an Answer whose .answer is bytes b'Paris'"),  # type: ignore[arg-type]
    ],
    ids=[
        "bytes",
        "list",
        "object",
        "None",
        "empty dict",
        "no answer key",
        "answer None",
        "answer list",
        "message None",
        "message no text",
        "response None",
        "result bytes",
    ],
)
def test_a_contender_that_returns_no_answer_has_that_error_and_is_not_scored_as_text(
    output: Any, described: str
) -> None:
    report = evaluate(CAPITAL, {"plain": lambda q: "Paris", "odd": lambda q: output})
    record = report.results[0]["odd"]
    assert record["error"].startswith(f"odd: ContenderOutputError: {described}")
    assert record["error"].endswith(
        "expected a string, a message with text content, a mapping with the answer string under 'answer' "
        "(or 'result', 'output', 'response'), a Response with a string .response, or a result with a "
        "string .answer"
    )
    assert record["answer"] == "" and record["sources"] == []
    # scored as a contender that raises: a wrong answer, and no grounding measured
    assert record["metrics"] == {"f1": 0.0, "em": 0.0, "gold_in_answer": 0.0, "f1_new": 0.0}
    assert report.summary()["odd"]["errors"] == 1


@pytest.mark.parametrize(
    ("output", "sources"),
    [
        ("Paris", []),
        ({"answer": "Paris", "context": [PARIS]}, ["paris.md"]),
        ({"result": "Paris", "source_documents": [PARIS]}, ["paris.md"]),
        ({"answer": Message("Paris")}, []),
        (Message("Paris"), []),
        (Message([{"type": "thinking", "thinking": "France..."}, {"type": "text", "text": "Par"}, "is"]), []),
        (Response("Paris", [PARIS]), ["paris.md"]),
        (Answer("Paris", [PARIS]), ["paris.md"]),
    ],
    ids=["str", "answer key", "result key", "answer message", "message", "text blocks", "response", "result"],
)
def test_every_answer_shape_the_docs_list_is_read_and_scored(output: Any, sources: list[str]) -> None:
    report = evaluate(CAPITAL, {"plain": lambda q: "Paris", "mine": lambda q: output})
    record = report.results[0]["mine"]
    assert record["error"] is None and record["answer"] == "Paris"
    assert [s["id"] for s in record["sources"]] == sources
    assert record["metrics"]["f1"] == record["metrics"]["em"] == 1.0
    assert report.summary()["mine"]["errors"] == 0


def test_every_built_in_strategy_and_a_user_strategy_run(data: tuple[Path, Path]) -> None:
    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    try:
        from corrective_rag import CorrectiveRAG
    finally:
        sys.path.pop(0)
    questions, corpus = data
    names = ["plain", "self", "hyde", "recursive", "healing"]
    report = evaluate(
        questions, names, llm=reader(), corpus=corpus, settings=EvalSettings(embed="none", limit=4)
    )
    assert report.contenders == names and len(report.questions) == 4
    for name in names:
        s = report.summary()[name]
        assert s["questions"] == 4 and s["errors"] == 0 and s["llm_calls"] >= 1
    # a strategy object of the user's, over the same index
    rag = report_rag = _index(corpus)
    mine = CorrectiveRAG(report_rag, FakeLLM({"Relevant:": "yes"}, default="Kenya"))
    contenders = {"plain": "plain", "corrective": mine}
    custom = evaluate(questions, contenders, llm=reader(), rag=rag, settings=EvalSettings(limit=3))
    assert custom.summary()["corrective"]["llm_calls"] > 1  # graded each document, then answered


def _index(corpus: Path) -> Any:
    from selfrag_core.evaluation.runner import _backend

    data = EvalData("x", [EvalQuestion("q", "q")])
    return _backend(data, corpus, None, "none", [])


def test_limit_and_seed_sample_the_same_questions(data: tuple[Path, Path]) -> None:
    ids = [
        [q.id for q in run(data, {"plain": lambda q: ""}, limit=5, seed=seed).questions] for seed in (1, 1, 2)
    ]
    assert ids[0] == ids[1] and ids[0] != ids[2] and len(ids[0]) == 5
    assert all(ANIMALS.index(a) < ANIMALS.index(b) for a, b in zip(ids[0], ids[0][1:], strict=False))


def test_replay_makes_no_call_and_gives_the_same_results(data: tuple[Path, Path], tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    names = ["plain", "hyde", "recursive"]
    first = run(data, names, llm=reader(), cache=cache)
    assert first.cache is not None and first.cache["misses"] > 0
    silent = reader()
    second = run(data, names, llm=silent, cache=cache, replay=True)
    assert silent.calls == []
    assert second.cache is not None and second.cache["path"] == str(cache)
    # every call the first run made (a recorded one or one replayed within the run) is replayed
    assert (second.cache["hits"], second.cache["misses"]) == (first.cache["hits"] + first.cache["misses"], 0)
    assert second.cache["contenders"]["hyde"]["misses"] == 0 and second.cache["judge"] is None

    def stable(report: Any) -> list[Any]:
        return [
            {
                n: (r["answer"], r["metrics"], r["llm_calls"], [d["id"] for d in r["sources"]])
                for n, r in rs.items()
            }
            for rs in report.results
        ]

    assert stable(first) == stable(second)


def varying() -> FakeLLM:
    """A model whose replies to one prompt vary from call to call (as llama-cpp's do)."""
    count = itertools.count(1)
    return FakeLLM(lambda prompt: f"reply {next(count)}")


def answers(report: Any) -> list[dict[str, str]]:
    return [{name: r["answer"] for name, r in rs.items()} for rs in report.results]


# two contenders that send the same prompts: plain, and plain again under another name
TWINS = {"plain": "plain", "twin": "plain"}
# sized for a capable model: the replies are the answers (no quote weighed in their place)
STANDARD = "standard"


def test_shared_replies_give_one_prompt_one_reply_in_every_contender(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    apart = run(
        data, TWINS, llm=varying(), cache=tmp_path / "apart.sqlite", limit=4, concurrency=1, preset=STANDARD
    )
    assert all(a["plain"] != a["twin"] for a in answers(apart))  # the model's noise, not the strategy's
    model = varying()
    shared = run(
        data,
        TWINS,
        llm=model,
        cache=tmp_path / "shared.sqlite",
        limit=4,
        concurrency=1,
        shared_replies=True,
        preset=STANDARD,
    )
    assert all(a["plain"] == a["twin"] for a in answers(shared)) and len(model.calls) == 4
    assert shared.comparisons()["twin"]["f1"]["mean"] == 0 and shared.settings["shared_replies"] is True
    cache = shared.cache
    assert cache is not None and cache["shared_replies"] and (cache["hits"], cache["misses"]) == (4, 4)
    assert cache["contenders"] == {
        "plain": {"hits": 0, "misses": 4, "borrowed": 0},
        "twin": {"hits": 4, "misses": 0, "borrowed": 0},  # its latency holds no model call
    }
    assert "calls the model answered: plain 4 of 4, twin 0 of 4" in shared.table()


def test_shared_replies_without_a_cache_share_through_a_temporary_file(data: tuple[Path, Path]) -> None:
    model = varying()
    shared = run(data, TWINS, llm=model, limit=3, shared_replies=True, preset=STANDARD)
    assert all(a["plain"] == a["twin"] for a in answers(shared)) and len(model.calls) == 3
    assert shared.cache is not None and shared.cache["path"] is None
    unshared = run(data, TWINS, llm=varying(), limit=3, preset=STANDARD)
    assert unshared.cache is None and all(a["plain"] != a["twin"] for a in answers(unshared))


def test_shared_replies_reuse_the_baselines_recordings_first_then_the_contenders_own(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    """A cache recorded apart is rerun shared with no model call: plain's reply to a
    prompt wins over the contender's own; a prompt plain never sent keeps the contender's."""
    cache = tmp_path / "calls.sqlite"
    first = run(data, TWINS, llm=varying(), cache=cache, limit=4, concurrency=1)
    silent = varying()
    again = run(data, TWINS, llm=silent, cache=cache, limit=4, replay=True, shared_replies=True)
    assert silent.calls == [] and answers(again) == [
        {"plain": a["plain"], "twin": a["plain"]} for a in answers(first)
    ]
    assert (
        again.cache is not None and again.cache["contenders"]["twin"]["borrowed"] == 0
    )  # plain's, now shared
    assert again.cache["contenders"]["plain"] == {"hits": 4, "misses": 0, "borrowed": 4}

    # a contender whose prompts plain never sent: its own recordings answer
    mine = {"plain": lambda question: "", "twin": "plain"}
    own = run(data, mine, llm=varying(), cache=tmp_path / "own.sqlite", limit=4, concurrency=1)
    replayed = run(
        data, mine, llm=silent, cache=tmp_path / "own.sqlite", limit=4, replay=True, shared_replies=True
    )
    assert silent.calls == [] and answers(replayed) == answers(own)
    assert replayed.cache is not None and replayed.cache["contenders"]["twin"]["borrowed"] == 4


def test_the_judge_keeps_its_own_recordings_when_replies_are_shared(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    claims = json.dumps({"claims": [{"claim": "a", "supported": True}]})
    judge = FakeLLM(claims)
    report = run(
        data, ["plain"], llm=reader(), judge=judge, cache=tmp_path / "c.sqlite", limit=2, shared_replies=True
    )
    assert report.cache is not None and report.cache["judge"] == {"hits": 0, "misses": 2, "borrowed": 0}
    assert "judge" not in report.cache["contenders"]


def test_a_miss_under_replay_is_an_error(data: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(CacheMissError, match="replay") as caught:
        run(data, ["plain"], llm=reader(), cache=tmp_path / "empty.sqlite", replay=True)
    assert isinstance(caught.value, ConfigurationError)


def test_retrieval_only_data_ranks_with_plain_and_hyde(tmp_path: Path) -> None:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    write_data(folder)
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": a, "text": f"Where does the {a} live?"}) + "\n" for a in ANIMALS[:3])
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{a}\td{i}\t1\n" for i, a in enumerate(ANIMALS[:3]))
    )
    hyde_llm = FakeLLM("A passage about where animals live, in some detail for the search.")
    report = evaluate(folder, llm=hyde_llm, settings=EvalSettings(embed="none"))
    assert report.settings["retrieval_only"] is True
    assert [m.name for m in report.metrics] == ["recall@10", "ndcg@10", "mrr"]
    first = report.to_dict()["questions"][0]["results"]
    assert sorted(first) == ["hyde", "plain"]  # the others cannot rank without answering
    assert first["plain"]["sources"][0]["id"] == "d0" and first["plain"]["metrics"]["ndcg@10"] == 1.0
    assert len(first["plain"]["sources"]) == 10  # k documents ranked
    assert report.summary()["self"]["questions"] == 0
    # HyDE's ranking costs its passages: a FakeLLM declares no profile, so the "standard"
    # preset (HyDE's own default of three passages, one LLM call each), in the report
    n = HyDERAGConfig().num_hypothetical_docs
    assert report.settings["preset"] == "standard"
    assert report.summary()["hyde"]["llm_calls"] == n and first["hyde"]["timeline"][0]["kind"] == "llm"
    assert report.summary()["plain"]["llm_calls"] == 0.0  # a search alone
    assert report.comparisons()["hyde"]["llm_calls"]["mean"] == n


def test_an_interrupted_run_keeps_what_finished(data: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"

    def stop_after_two(done: int, total: int, question: str) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(data, ["plain"], llm=reader(), output=out, concurrency=1, progress=stop_after_two)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["summary"]["plain"]["questions"] == 2


def test_outputs_results_summary_and_report(data: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    report = run(data, ["plain", "hyde"], llm=reader(), output=out, limit=3)
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(q.id for q in report.questions)
    assert all(set(line["results"]) == {"plain", "hyde"} for line in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema"] == "selfrag.eval/1" and summary["baseline"] == "plain"
    assert set(summary["comparisons"]) == {"hyde"}
    html = (out / "report.html").read_text()
    assert html.count("<details") == 3 and "hyde" in html


def test_bad_questions_are_reported_and_the_rest_evaluated(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(
        '{"question": "Where does the lion live?", "answers": ["Kenya"]}\n'
        "not json\n"
        '{"question": "Where does the yak live?", "answer": ["Tibet"]}\n'
    )
    data = load_jsonl(path)
    report = evaluate(data, {"plain": lambda q: "Kenya"})
    assert len(report.questions) == 1 and [p.where for p in report.problems] == ["q.jsonl:2", "q.jsonl:3"]
    assert "q.jsonl:3" in report.table() and "answers" in str(report.problems[1])


def test_bad_arguments_are_clear_errors(data: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="baseline 'plain'"):
        run(data, {"mine": lambda q: ""})
    with pytest.raises(ConfigurationError, match="needs an LLM"):
        run(data, ["plain"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigurationError, match="no valid documents"):
        evaluate(data[0], ["plain"], llm=reader(), corpus=empty, settings=EvalSettings(embed="none"))
    with pytest.raises(TypeError, match="contender 'x'"):
        run(data, {"plain": lambda q: "", "x": 42})


class Lookalike:
    """Has ``invoke``, ``query`` and ``plan`` as a runnable, a query engine and a strategy
    have them, and is none of them: only a callable."""

    def invoke(self, question: str) -> str:
        return "invoked"

    def query(self, question: str) -> str:
        return "queried"

    def plan(self, question: str, context: Any = None) -> Any:
        raise AssertionError("not a strategy: never planned")

    def __call__(self, question: str) -> str:
        return "Paris"


def test_a_contender_is_recognised_by_its_type_not_by_its_method_names() -> None:
    report = evaluate(CAPITAL, {"plain": lambda q: "Paris", "like": Lookalike()})
    assert report.results[0]["like"]["answer"] == "Paris"  # called, not invoked, queried or planned
    uncallable = type("Uncallable", (), {"invoke": Lookalike.invoke, "query": Lookalike.query})()
    with pytest.raises(TypeError, match="contender 'odd' is a Uncallable: give a strategy"):
        evaluate(CAPITAL, {"plain": lambda q: "Paris", "odd": uncallable})
    # a Response of another package is no LlamaIndex Response: not an answer
    other = type("Response", (), {"response": "Paris", "source_nodes": []})()
    record = evaluate(CAPITAL, {"plain": lambda q: "Paris", "odd": lambda q: other}).results[0]["odd"]
    assert record["error"].startswith("odd: ContenderOutputError: returned Response <")


def test_the_command_line_writes_the_report_and_replays(
    data: tuple[Path, Path], tmp_path: Path, capsys: Any
) -> None:
    questions, corpus = data
    out, cache = tmp_path / "out", tmp_path / "calls.sqlite"
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "none",
            "--strategies", "plain,hyde", "--limit", "4", "--out", str(out), "--cache", str(cache),
            "--plain"]  # fmt: skip
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "plain" in first and "hyde" in first and "verdict" in first and "0 replayed" in first
    assert (out / "results.jsonl").exists() and (out / "summary.json").exists()
    assert main([*args, "--replay"]) == 0
    assert " 0 made" in capsys.readouterr().out
    assert main([*args[:-5], "--out", str(out), "--cache", str(tmp_path / "other.sqlite"), "--replay"]) == 2
    assert "run once without replay" in capsys.readouterr().err
    assert main([*args, "--replay", "--shared-replies"]) == 0  # plain's and hyde's recordings, shared
    shared = capsys.readouterr().out
    assert " 0 made" in shared and "shared replies: one reply a prompt" in shared
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["shared_replies"] is True and summary["cache"]["misses"] == 0


def test_the_command_line_skips_a_line_too_deep_to_read_and_names_it(
    data: tuple[Path, Path], tmp_path: Path, capsys: Any
) -> None:
    questions, corpus = data
    with questions.open("a", encoding="utf-8") as f:
        f.write(DEEP + "\n")  # line 13
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "none",
            "--strategies", "plain", "--limit", "2", "--out", str(tmp_path / "out"), "--no-cache",
            "--plain"]  # fmt: skip
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"selfrag: skipped questions.jsonl:13: {TOO_DEEP}; write one JSON object per line" in err


def test_the_command_line_exits_2_with_one_line_on_unreadable_questions(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP + "\n", encoding="utf-8")
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"question": "Where does the lion live?"}\n', encoding="utf-8")
    deny_reading(secret, monkeypatch)
    expected = {
        deep: f"{deep}: no valid questions: deep.jsonl:1: {TOO_DEEP}; write one JSON object per line",
        secret: f"{secret}: cannot be read (Permission denied); check the path and its permissions",
        tmp_path: f"{tmp_path / 'corpus.jsonl'}: no such file; a BEIR folder holds corpus.jsonl",
    }
    for path, message in expected.items():
        assert main(["eval", str(path), "--llm", "fake", "--embedder", "none", "--no-cache", "--plain"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"selfrag: error: {message}")


def test_squad_json_brings_its_paragraphs_as_the_corpus(tmp_path: Path) -> None:
    paragraphs = [
        {
            "context": f"The {a} lives in {p}.",
            "qas": [
                {
                    "id": a,
                    "question": f"Where does the {a} live?",
                    "answers": [{"text": p, "answer_start": 0}],
                }
            ],
        }
        for a, p in list(PLACES.items())[:4]
    ]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "Animals", "paragraphs": paragraphs}]}))
    report = evaluate(path, ["plain"], llm=reader(), settings=EvalSettings(embed="none"))
    plain = report.summary()["plain"]["metrics"]
    assert plain["f1"]["mean"] == 1.0 and plain["recall@10"]["mean"] == 1.0
    assert report.results[1]["plain"]["sources"][0]["id"] == "Animals#1"  # the paragraph's id


def test_the_judge_scores_faithfulness_only_when_asked(data: tuple[Path, Path]) -> None:
    claims = json.dumps({"claims": [{"claim": "a", "supported": True}, {"claim": "b", "supported": False}]})
    judge = FakeLLM(claims)
    judged = run(data, ["plain"], llm=reader(), judge=judge, limit=3)
    assert judged.summary()["plain"]["metrics"]["faithfulness"] == {"mean": 0.5, "n": 3}  # 1 of 2 claims
    assert len(judge.calls) == 3 and "faithfulness" in [m.name for m in judged.metrics]
    plain = run(data, ["plain"], llm=reader(), limit=3)
    assert "faithfulness" not in plain.summary()["plain"]["metrics"]


def test_the_report_measures_how_far_the_support_check_can_be_trusted() -> None:
    """Per contender: the verifier's AUROC for "gold in the answer", and the F1 of the
    answers it certifies against those it flags."""
    doc = RetrievedDoc("The Eiffel Tower was completed in 1889 in Paris.", metadata={"source": "tower.md"})
    questions = EvalData(
        "towers",
        [
            EvalQuestion("q1", "When was the Eiffel Tower completed?", ("1889",)),
            EvalQuestion("q2", "Where is the Eiffel Tower?", ("Paris",)),
            EvalQuestion("q3", "When was the Eiffel Tower completed, again?", ("1889",)),
        ],
    )
    replies = {  # right and supported; right and supported; wrong, with a year no source holds
        "When was the Eiffel Tower completed?": "The Eiffel Tower was completed in 1889.",
        "Where is the Eiffel Tower?": "The Eiffel Tower is in Paris.",
        "When was the Eiffel Tower completed, again?": "The Eiffel Tower was completed in 1901.",
    }
    contenders = {"plain": lambda q: Answer(replies[q], [doc])}
    report = evaluate(questions, contenders)
    scores = report.values("plain", "support_score")
    assert scores[0] == scores[1] == 1.0 and scores[2] is not None and scores[2] < 0.5
    verifier = report.summary()["plain"]["verifier"]
    assert verifier["auroc"] == 1.0 and (verifier["certified"], verifier["flagged"]) == (2, 1)
    assert verifier["f1_certified"] > verifier["f1_flagged"]
    assert re.search(r"plain\s+1\.000\s+2, \d\.\d{3}\s+1, \d\.\d{3}", report.table())
    assert report.to_dict()["summary"]["plain"]["verifier"] == verifier


def test_a_corpus_indexed_for_the_run_only_is_removed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --index the corpus goes into a temporary index, gone when the run ends
    (each run used to leave a selfrag-eval-* folder behind)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    questions = [EvalQuestion("q", "Where does the cat live?", ("Paris",))]
    corpus = [{"text": "The cat lives in Paris.", "source": "cat"}]
    data = EvalData("cats", questions, [])
    corpus_path = tmp_path / "corpus.jsonl"
    lines = (json.dumps({"_id": d["source"], "text": d["text"]}) + "\n" for d in corpus)
    corpus_path.write_text("".join(lines))
    report = evaluate(data, ["plain"], llm=reader(), corpus=corpus_path, settings=EvalSettings(embed="none"))
    assert report.results[0]["plain"]["sources"]  # it searched the temporary index
    assert not list(tmp_path.glob("selfrag-eval-*"))


class _SmallFake(FakeLLM):
    """A scripted model that declares the embedded models' profile, as ``LocalLLM`` does."""

    profile = SMALL_LOCAL


@pytest.mark.parametrize(
    ("llm", "preset", "hypotheticals"),
    [
        (FakeLLM("Kenya"), "standard", HyDERAGConfig().num_hypothetical_docs),
        (_SmallFake("Kenya"), "small", 1),
    ],
)
def test_the_default_preset_is_the_one_the_model_declares(
    data: tuple[Path, Path], llm: FakeLLM, preset: str, hypotheticals: int
) -> None:
    # a model that declares no profile (a LangChain chat model, say) is sized as a capable
    # one; the embedded models' profile gets the small preset, as `selfrag eval --llm local`
    report = run(data, ["plain", "hyde"], llm=llm, limit=1)
    assert report.settings["preset"] == preset
    hyde = report.results[0]["hyde"]
    assert sum(1 for step in hyde["timeline"] if step["kind"] == "llm") == hypotheticals + 1
    explicit = run(data, ["plain", "hyde"], llm=llm, limit=1, preset="small")
    assert explicit.settings["preset"] == "small"  # a preset given is the one used
