"""Refitting the support check on an evaluation's answers (``selfrag eval --fit-verifier``),
and a verifier that carries the refit checks (``--verifier FILE.json``); scripted models."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import ConfigurationError, PlainRAG, PlainRAGConfig
from selfrag_core.cli import main
from selfrag_core.evaluation import EvalData, EvalQuestion, EvalSettings, evaluate
from selfrag_core.evaluation.verifier_fit import LABEL_RULE, fit_verifier, held_out
from selfrag_core.presets import load_verifier
from selfrag_core.signals.fitted import Checks, shipped
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.verify import (
    LexicalVerifier,
    checks_of,
    support_probability,
    support_rows,
    verify_answer,
)

BRIDGES = [
    "Alder", "Birch", "Cedar", "Elm", "Fir", "Hazel", "Juniper", "Larch", "Maple", "Oak", "Pine",
    "Rowan", "Spruce", "Willow", "Yew", "Aspen", "Beech", "Cypress", "Holly", "Linden", "Poplar",
    "Sequoia", "Walnut", "Chestnut",
]  # fmt: skip
DESIGNERS = [
    "Maria Lopez", "Kenji Sato", "Amara Okafor", "Lars Nilsson", "Priya Raman", "Tomas Novak",
    "Elena Petrova", "Omar Haddad", "Sofia Rossi", "Jonas Berg", "Ines Duarte", "Ravi Menon",
    "Hana Kim", "Pablo Ortega", "Freya Lund", "Marco Bianchi", "Aiko Mori", "Nadia Farouk",
    "Emil Varga", "Lucia Gomez", "Tariq Aziz", "Greta Vogel", "Yusuf Demir", "Clara Weiss",
]  # fmt: skip


def passage(i: int) -> str:
    return f"The {BRIDGES[i]} bridge was designed by {DESIGNERS[i]}."


def bridges(n: int) -> EvalData:
    asked = [
        EvalQuestion(f"b{i:02d}", f"Who designed the {BRIDGES[i]} bridge?", (DESIGNERS[i],)) for i in range(n)
    ]
    return EvalData("bridges", asked)


def designer_llm(right: Any = lambda i: i % 2 == 0) -> FakeLLM:
    """Names the bridge's designer where ``right(i)``, else another bridge's: the
    label (gold in the answer) then follows from whether the passage holds the name."""

    def answer(prompt: str) -> str:
        i = BRIDGES.index(re.findall(r"Who designed the (\w+) bridge", prompt)[-1])
        who = DESIGNERS[i] if right(i) else DESIGNERS[(i + 7) % len(DESIGNERS)]
        return f"The {BRIDGES[i]} bridge was designed by {who}."

    return FakeLLM(answer)


def run(n: int, llm: FakeLLM, **settings: Any) -> Any:
    rag = FakeRetriever([passage(i) for i in range(len(BRIDGES))])
    plain = PlainRAG(rag, llm, config=PlainRAGConfig(top_k=1))
    return evaluate(bridges(n), {"plain": plain}, settings=EvalSettings(**settings))


def test_support_rows_are_the_rows_the_support_check_scores() -> None:
    docs = [passage(0), passage(1)]
    question = "Who designed the Alder bridge?"
    for answer in [passage(0), "It was designed by Kenji Sato. It is long."]:
        rows = support_rows(answer, question, docs)
        assert len(rows) == len(re.findall(r"\.", answer))  # one row a checked sentence
        check = shipped().pick("support", semantic=False)
        assert support_probability(check, rows) == pytest.approx(
            verify_answer(answer, docs, question=question).probability
        )
    assert support_rows("Answer: 1\nAnswer: 1\nAnswer: 1\nAnswer: 1", question, docs) == []  # a loop
    assert checks_of(None) is shipped() and checks_of(LexicalVerifier()) is shipped()


def test_the_refit_file_round_trips_and_moves_the_scores_toward_the_feature_that_holds_the_label(
    tmp_path: Path,
) -> None:
    report = run(20, designer_llm(), support_features=True)
    record = report.results[0]["plain"]
    assert record["support_rows"] and set(record["support_rows"][0]) >= {"names_missing", "lexical"}
    fit = fit_verifier(report, holdout=0.25)
    assert fit.fitted_on + fit.held == 20 and 0 < fit.positives < fit.fitted_on
    path = fit.write(tmp_path / "checks.json")
    loaded = Checks.load(path)
    assert loaded.to_dict() == fit.checks.to_dict()
    assert json.loads(path.read_text())["version"] == shipped().to_dict()["version"]
    assert loaded.pick("answering", False) == shipped().pick("answering", False)  # only support refit
    refit = loaded.pick("support", semantic=False)
    assert refit.about["fitted_on"].startswith("selfrag eval run bridges") and refit != shipped().pick(
        "support", False
    )

    # bridges the fit never saw: the name the passage lacks is what tells a wrong answer
    docs, question = [passage(21)], f"Who designed the {BRIDGES[21]} bridge?"
    right, wrong = passage(21), passage(21).replace(DESIGNERS[21], "Hana Kim")
    ours = LexicalVerifier(checks=loaded)
    before = {a: verify_answer(a, docs, question=question).probability for a in (right, wrong)}
    after = {a: verify_answer(a, docs, ours, question).probability for a in (right, wrong)}
    assert after[wrong] < before[wrong] and after[wrong] < refit.threshold <= after[right]
    assert after[right] - after[wrong] > before[right] - before[wrong]
    # the verdict's score and support are the rules', unchanged by the checks
    rules = verify_answer(wrong, docs, question=question)
    assert verify_answer(wrong, docs, ours, question).score == rules.score
    # the shipped and the refit check compared on the held-out answers
    assert set(fit.held_out) == {"shipped (lexical)", "refit (lexical)"}
    assert fit.held_out["refit (lexical)"]["auroc"] == 1.0
    assert type(fit.held_out["refit (lexical)"]["threshold"]) is float  # plain JSON numbers
    assert LABEL_RULE in fit.table() and "refit (lexical)" in fit.table()


def test_a_verifier_with_its_own_checks_adds_the_auroc_of_its_probability_to_the_report(
    tmp_path: Path,
) -> None:
    fit = fit_verifier(run(20, designer_llm(), support_features=True), holdout=0.0)
    assert fit.held == 0 and fit.held_out == {} and "nothing to compare on" in fit.table()
    default = run(8, designer_llm())
    assert "auroc_probability" not in default.summary()["plain"]["verifier"]
    assert "support_rows" not in default.results[0]["plain"]  # recorded only when asked for
    assert "AUROC of .probability" not in default.table()
    ours = run(8, designer_llm(), verifier=LexicalVerifier(checks=fit.checks))
    assert ours.summary()["plain"]["verifier"]["auroc_probability"] == 1.0
    assert "AUROC of .probability" in ours.table()
    # the rules' figures are the verifier's threshold's, the same with either checks
    assert ours.summary()["plain"]["verifier"]["auroc"] == default.summary()["plain"]["verifier"]["auroc"]


def test_too_few_answers_one_label_or_no_features_are_refused_saying_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match="at least 8 labelled answers to fit on; bridges has 5"):
        fit_verifier(run(5, designer_llm(), support_features=True), holdout=0.0)
    with pytest.raises(ConfigurationError, match="both labels, at least 2 of each; 12 of the 12 answers"):
        fit_verifier(run(12, designer_llm(lambda i: True), support_features=True), holdout=0.0)
    with pytest.raises(ConfigurationError, match=r"no answer with support features.*--fit-verifier"):
        fit_verifier(run(12, designer_llm()), holdout=0.0)
    with pytest.raises(ConfigurationError, match=r"holdout must be a share of the questions in \[0, 1\)"):
        fit_verifier(run(12, designer_llm(), support_features=True), holdout=1.0)
    with pytest.raises(TypeError, match="checks must be Checks"):
        LexicalVerifier(checks={"version": 1})  # type: ignore[arg-type]


def test_a_finished_runs_folder_is_refit_from_and_a_garbage_row_is_refused(tmp_path: Path) -> None:
    run(12, designer_llm(), support_features=True, output=tmp_path / "run")
    assert fit_verifier(tmp_path / "run", holdout=0.0).fitted_on == 12  # read from its results.jsonl
    results = tmp_path / "run" / "results.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    lines[3]["results"]["plain"]["support_rows"] = [{"window": "high"}]
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ConfigurationError, match="support_rows is not what selfrag eval writes; rerun"):
        fit_verifier(tmp_path / "run", holdout=0.0)


def test_the_held_out_questions_are_chosen_by_id_alone() -> None:
    ids = [f"q{i}" for i in range(40)]
    held = held_out(ids, 0.3)
    assert len(held) == 12 and held <= set(ids)
    assert held_out(list(reversed(ids)), 0.3) == held  # any order, the same split
    assert held_out(ids + ids[:5], 0.3) == held  # a question's answers (several contenders) go together
    assert held_out(ids, 0.0) == set()


def test_the_command_line_refits_prints_both_checks_and_reads_the_file_back(
    tmp_path: Path, capsys: Any
) -> None:
    pytest.importorskip("bm25s")
    corpus, questions = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": passage(i)}) + "\n" for i in range(24)))
    # the extractive stand-in (--llm fake) quotes the passage: right where the gold is its designer
    lines = [
        {"id": f"b{i:02d}", "question": f"Who designed the {BRIDGES[i]} bridge?",
         "answers": [DESIGNERS[i] if i % 3 else "Nobody Known"]}
        for i in range(24)
    ]  # fmt: skip
    questions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    checks, out = tmp_path / "mine.json", tmp_path / "out"
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "none",
            "--strategies", "plain", "--out", str(out), "--no-cache", "--plain"]  # fmt: skip
    assert main([*args, "--fit-verifier", str(checks), "--holdout", "0.3"]) == 0
    printed = capsys.readouterr().out
    assert f"label: {LABEL_RULE}" in printed and f"--verifier {checks}" in printed
    shipped_row = re.search(r"shipped \(lexical\)\s+(\d\.\d{3})\s+(\d\.\d{3})\s+(\d\.\d\d)", printed)
    refit_row = re.search(r"refit \(lexical\)\s+(\d\.\d{3})\s+(\d\.\d{3})\s+(\d\.\d\d)", printed)
    assert shipped_row and refit_row, printed
    assert Checks.load(checks).has("support")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verifier_fit"]["path"] == str(checks)
    assert summary["verifier_fit"]["held_out"]["refit (lexical)"]["auroc"] == float(refit_row.group(1))
    verifier = load_verifier(str(checks))
    assert isinstance(verifier, LexicalVerifier) and verifier.checks == Checks.load(checks)
    assert main([*args, "--verifier", str(checks)]) == 0
    assert "AUROC of .probability" in capsys.readouterr().out
    (tmp_path / "broken.json").write_text('{"version": 0}')
    assert main([*args, "--verifier", str(tmp_path / "broken.json")]) == 2
    assert "is not a version-1 checks file" in capsys.readouterr().err
