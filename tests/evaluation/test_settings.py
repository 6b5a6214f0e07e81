"""``EvalSettings``: evaluate()'s run settings as one frozen, validated value; the old
keywords still work for a release, deprecated, and give the same report."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from test_evaluate import reader, write_data

from selfrag_core import ConfigurationError
from selfrag_core.cli import main
from selfrag_core.evaluation import EvalSettings, evaluate

pytest.importorskip("bm25s")

CONTENDERS = ["plain", "hyde"]


def stable(report: Any) -> dict[str, Any]:
    """What a report says, without the timings."""
    return {
        "settings": report.settings,
        "contenders": report.contenders,
        "questions": [q.id for q in report.questions],
        "metrics": [m.name for m in report.metrics],
        "results": [
            {
                n: (r["answer"], r["metrics"], r["llm_calls"], [d["id"] for d in r["sources"]])
                for n, r in rs.items()
            }
            for rs in report.results
        ],
        "cache": None if report.cache is None else (report.cache["hits"], report.cache["misses"]),
    }


def test_the_old_keywords_warn_and_give_the_report_the_settings_give(tmp_path: Path) -> None:
    questions, corpus = write_data(tmp_path)
    old = {
        "k": 5, "top_k": 2, "preset": "standard", "limits": {"max_llm_calls": 4}, "limit": 6, "seed": 3,
        "concurrency": 1, "embed": "none", "cache": tmp_path / "old.sqlite", "output": tmp_path / "old",
    }  # fmt: skip
    extra = {"llm": "fake", "offset": None}
    with pytest.warns(DeprecationWarning) as caught:
        before = evaluate(questions, CONTENDERS, llm=reader(), corpus=corpus, settings=extra, **old)
    messages = {str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)}
    assert messages >= {
        f"evaluate({name}=...) is deprecated; pass settings=EvalSettings({name}=...)" for name in old
    }
    assert "evaluate(settings=...) is deprecated; pass settings=EvalSettings(extra=...)" in messages
    assert all(w.filename == __file__ for w in caught)  # the warning points at the call

    new = {**old, "cache": tmp_path / "new.sqlite", "output": tmp_path / "new"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        after = evaluate(
            questions, CONTENDERS, llm=reader(), corpus=corpus, settings=EvalSettings(**new, extra=extra)
        )
    assert stable(before) == stable(after)
    assert after.settings["k"] == 5 and after.settings["llm"] == "fake" and after.settings["seed"] == 3
    assert (tmp_path / "old" / "summary.json").exists() and (tmp_path / "new" / "summary.json").exists()


def test_an_old_keyword_applies_over_a_field_left_at_its_default_and_agrees_with_one_set(
    tmp_path: Path,
) -> None:
    questions, _ = write_data(tmp_path)
    answers = {"plain": lambda q: "Kenya"}
    with pytest.warns(DeprecationWarning, match=re.escape("evaluate(limit=...) is deprecated")):
        report = evaluate(questions, answers, settings=EvalSettings(seed=2), limit=3)
    assert report.settings["limit"] == 3 and report.settings["seed"] == 2
    with pytest.warns(DeprecationWarning):  # the same value twice: no conflict
        report = evaluate(questions, answers, settings=EvalSettings(limit=3), limit=3)
    assert len(report.questions) == 3


def test_an_old_keyword_that_differs_from_a_field_the_settings_set_is_refused(tmp_path: Path) -> None:
    questions, _ = write_data(tmp_path)
    answers = {"plain": lambda q: "Kenya"}
    conflict = "evaluate(k=7) conflicts with settings=EvalSettings(k=5); pass one of them"
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError, match=re.escape(conflict)):
        evaluate(questions, answers, settings=EvalSettings(k=5), k=7)
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ConfigurationError, match="conflicts with settings="),
    ):
        evaluate(questions, answers, settings=EvalSettings(limit=4), limit=None)  # None is a value here


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("k", 0, "k must be >= 1, got 0"),
        ("concurrency", 0, "concurrency must be >= 1, got 0"),
        ("concurrency", 1.5, "concurrency must be an int, got float"),
        ("limit", 0, "limit must be at least 1 (or None for all questions), got 0"),
        ("top_k", 0, "top_k must be >= 1, got 0"),
        ("preset", "huge", "unknown preset 'huge'; choose one of"),
        ("embed", "bert", "unknown embedder 'bert'; choose one of"),
        ("replay", "yes", "replay must be True or False, got 'yes'"),
        ("retrieval_only", 1, "retrieval_only must be True or False, got 1"),
        ("seed", "1", "seed must be an int, got str"),
        ("limits", [("max_llm_calls", 2)], "limits must be a mapping, got list"),
        ("cache", 3, "cache must be a path or None, got int"),
        ("baseline", "", "baseline must be a contender's name, got ''"),
    ],
)
def test_a_bad_value_fails_at_construction_with_the_message_evaluate_gave(
    field: str, value: Any, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        EvalSettings(**{field: value})
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        EvalSettings().replace(**{field: value})
    questions, _ = write_data(tmp_path)  # the old keyword: the same message
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError, match=re.escape(message)):
        evaluate(questions, {"plain": lambda q: "Kenya"}, **{field: value})


def test_settings_are_frozen_copied_and_replaced_by_name() -> None:
    limits = {"max_llm_calls": 2}
    settings = EvalSettings(limits=limits, limit=5)
    limits["max_llm_calls"] = 9
    assert settings.limits == {"max_llm_calls": 2}  # a copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.k = 3  # type: ignore[misc]
    assert settings.replace(k=3) == EvalSettings(limits={"max_llm_calls": 2}, limit=5, k=3)
    assert hash(settings) == hash(EvalSettings(limits={"other": 1}, limit=5))  # the mappings are not hashed
    with pytest.raises(ConfigurationError, match="EvalSettings has no setting kk; its settings are baseline"):
        settings.replace(kk=1)
    assert EvalSettings(limits=None).limits == {}  # type: ignore[arg-type]


def test_an_unknown_keyword_and_a_wrong_settings_type_are_type_errors(tmp_path: Path) -> None:
    questions, _ = write_data(tmp_path)
    answers = {"plain": lambda q: "Kenya"}
    with pytest.raises(TypeError, match=re.escape("evaluate() got an unexpected keyword argument 'kk'")):
        evaluate(questions, answers, kk=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'extra'"):  # a field, never a keyword
        evaluate(questions, answers, extra={})
    with pytest.raises(TypeError, match="settings must be a EvalSettings, got list"):
        evaluate(questions, answers, settings=[1])  # type: ignore[arg-type]


def test_selfrag_eval_passes_its_settings_without_a_deprecated_keyword(
    tmp_path: Path, capsys: Any, recwarn: pytest.WarningsRecorder
) -> None:
    questions, corpus = write_data(tmp_path)
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "none",
            "--strategies", "plain", "--limit", "2", "--k", "5", "--out", str(tmp_path / "out"),
            "--no-cache", "--plain"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert not [w for w in recwarn if "evaluate(" in str(w.message)]
