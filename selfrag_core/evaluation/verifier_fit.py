"""Refit the support check on a ``selfrag eval`` run's answers (``--fit-verifier FILE``).

``selfrag eval QUESTIONS --fit-verifier checks.json`` records each answer's support
feature rows (:func:`~selfrag_core.verify.support_rows`: its sentences against the
documents it was given, the features the check scores at run time), then refits the
support check's logistic model on them, one answer one unit of weight (its sentences'
rows share it), labelled by :data:`LABEL_RULE`. The questions are split by id (a hash
of it, so the same questions are held out on every run): the check is fitted on the rest, its
threshold chosen there (the best balanced accuracy), and the shipped check and the refit
one are compared on the held-out answers (AUROC, balanced accuracy at each one's
threshold). The file written is a checks file of the shipped format and version, the
support check refitted and the other checks the shipped ones; ``--verifier checks.json``
(``LexicalVerifier(checks=Checks.load(path))``) uses it. From Python::

    from selfrag_core.evaluation.verifier_fit import fit_verifier
    fit = fit_verifier("eval-results/mine", holdout=0.3)
    print(fit.table()); fit.write("checks.json")
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.metrics import auroc
from selfrag_core.evaluation.report import EvalReport, _grid
from selfrag_core.evaluation.router import _rows
from selfrag_core.signals.features import SEMANTIC, SUPPORT_FEATURES
from selfrag_core.signals.fitted import Checks, LogisticCheck, fit, shipped
from selfrag_core.verify import support_probability

#: how an answer is labelled: the rule of the eval's ``gold_in_answer`` metric
LABEL_RULE = (
    "supported = a gold answer occurs in the answer as a run of whole normalised tokens "
    "(the pick, for a question offering two alternatives or asking yes or no): the eval's gold_in_answer"
)
#: the default share of the questions held out from the fit
HOLDOUT = 0.3
#: the fewest labelled answers, and of each label, the fit needs
MIN_ANSWERS, MIN_EACH = 8, 2
#: the weight of the L2 penalty on the (standardised) weights
L2 = 1.0
#: the thresholds the fit chooses from
THRESHOLDS = tuple(round(float(t), 2) for t in np.arange(0.05, 0.96, 0.01))


@dataclass(frozen=True)
class _Answer:
    question: str
    rows: list[dict[str, float]]
    label: bool


def _answers(run: EvalReport | str | os.PathLike[str]) -> tuple[str, list[_Answer]]:
    """(the run's name, each answer with support rows and a gold label) of a report or a
    run's folder."""
    name, pairs = _rows(run)
    found = []
    for qid, records in sorted(pairs, key=lambda pair: pair[0]):
        for record in records.values():
            rows, gold = record.get("support_rows"), (record.get("metrics") or {}).get("gold_in_answer")
            if rows and isinstance(gold, (int, float)):
                found.append(_Answer(qid, _read(rows, f"{name}, question {qid}"), gold > 0))
    return name, found


def _read(rows: Any, where: str) -> list[dict[str, float]]:
    """``rows`` as support feature rows, or a ConfigurationError naming ``where``."""
    try:
        read = [{str(k): float(v) for k, v in row.items()} for row in rows]
    except (AttributeError, TypeError, ValueError):
        read = []
    if read and all(f in r and math.isfinite(r[f]) for r in read for f in SUPPORT_FEATURES):
        return read
    raise ConfigurationError(
        f"{where}: support_rows is not what selfrag eval writes; rerun it with --fit-verifier"
    )


def held_out(questions: Sequence[str], holdout: float) -> set[str]:
    """The ids of ``questions`` held out: ``holdout`` of them (rounded), those whose ids
    hash lowest, so the split depends on the ids alone, not on their order or a seed."""
    ids = sorted(set(questions), key=lambda q: hashlib.sha256(q.encode("utf-8")).digest())
    return set(ids[: round(len(ids) * holdout)])


def balanced_accuracy(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> float | None:
    """The mean of the share of positives at or above ``threshold`` and of negatives below
    it; None without both."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    if y.all() or not y.any():
        return None
    return float(((s[y] >= threshold).mean() + (s[~y] < threshold).mean()) / 2)


def _figures(check: LogisticCheck, answers: list[_Answer]) -> dict[str, float | None]:
    scores = [support_probability(check, a.rows) for a in answers]
    labels = [a.label for a in answers]
    return {
        "auroc": _round(auroc(scores, labels)),
        "balanced_accuracy": _round(balanced_accuracy(scores, labels, check.threshold)),
        "threshold": check.threshold,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass
class VerifierFit:
    """The refit support check (``checks``: the shipped checks with it in their place) and
    the shipped and refit checks' figures on the held-out answers (``held_out``: by
    name, AUROC, balanced accuracy at its threshold, and that threshold)."""

    checks: Checks
    fitted_on: int
    held: int
    positives: int
    held_out: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        return {
            "label": LABEL_RULE,
            "answers": {"fitted": self.fitted_on, "held_out": self.held, "positive": self.positives},
            "held_out": self.held_out,
        }

    def table(self) -> str:
        """The label rule and the held-out figures as text."""
        lines = [
            f"label: {LABEL_RULE}",
            f"support check refitted on {self.fitted_on} answer(s) ({self.positives} labelled supported)",
        ]
        if not self.held_out:
            return "\n".join([*lines, "no answer held out (--holdout 0): nothing to compare on"])
        rows = [[f"held out ({self.held} answers)", "AUROC", "balanced acc.", "threshold"]]
        rows += [
            [name, _fmt(f["auroc"]), _fmt(f["balanced_accuracy"]), _fmt(f["threshold"], 2)]
            for name, f in self.held_out.items()
        ]
        return "\n".join([*lines, *_grid(rows)])

    def write(self, path: str | os.PathLike[str]) -> Path:
        """The checks file (the shipped format and version: ``Checks.load`` reads it)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.checks.save(target)
        return target


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def fit_verifier(
    run: EvalReport | str | os.PathLike[str], *, holdout: float = HOLDOUT, l2: float = L2
) -> VerifierFit:
    """Refit the support check on ``run`` (an :class:`EvalReport` or a run's folder, its
    answers' ``support_rows`` recorded: ``EvalSettings(support_features=True)``), holding
    out the questions :func:`held_out` picks for ``holdout``. Raises ConfigurationError
    when the run has too few labelled answers, or of one label only."""
    if not 0 <= holdout < 1:
        raise ConfigurationError(f"holdout must be a share of the questions in [0, 1), got {holdout}")
    name, answers = _answers(run)
    held_ids = held_out([a.question for a in answers], holdout)
    train = [a for a in answers if a.question not in held_ids]
    held = [a for a in answers if a.question in held_ids]
    _enough(name, answers, train)
    semantic = all(SEMANTIC in r for a in answers for r in a.rows)  # the run's verifier had an embedder
    about = {"fitted_on": f"selfrag eval run {name}: its answers, {LABEL_RULE}", "answers": len(train)}
    variants = {"lexical": _fit(train, SUPPORT_FEATURES, l2, about)}
    if semantic:
        variants["semantic"] = _fit(train, (*SUPPORT_FEATURES, SEMANTIC), l2, about)
    checks = shipped().with_kind("support", variants)
    result = VerifierFit(checks, len(train), len(held), sum(a.label for a in train))
    if held:
        variant = "semantic" if semantic else "lexical"
        result.held_out = {
            f"shipped ({variant})": _figures(shipped().pick("support", semantic), held),
            f"refit ({variant})": _figures(variants[variant], held),
        }
    return result


def _enough(name: str, answers: list[_Answer], train: list[_Answer]) -> None:
    """Raise ConfigurationError, saying what to do, when ``train`` is too small to fit on."""
    if not answers:
        raise ConfigurationError(
            f"{name} has no answer with support features and a gold answer: run selfrag eval with "
            "--fit-verifier (it records them) on questions with gold answers"
        )
    positives = sum(a.label for a in train)
    if len(train) < MIN_ANSWERS:
        raise ConfigurationError(
            f"refitting the support check needs at least {MIN_ANSWERS} labelled answers to fit on; "
            f"{name} has {len(train)} outside the held-out share: run more questions (a larger --limit) "
            "or hold out fewer (a smaller --holdout)"
        )
    if min(positives, len(train) - positives) < MIN_EACH:
        raise ConfigurationError(
            f"refitting the support check needs answers of both labels, at least {MIN_EACH} of each; "
            f"{positives} of the {len(train)} answers of {name} it would fit on hold a gold answer: run "
            "questions its answers get wrong as well as right"
        )


def _fit(
    answers: list[_Answer], features: Sequence[str], l2: float, about: Mapping[str, Any]
) -> LogisticCheck:
    """The support check over ``features`` fitted on ``answers`` (each answer's rows
    weighing one in all), its threshold the best balanced accuracy on them."""
    rows = [r for a in answers for r in a.rows]
    labels = [a.label for a in answers for _ in a.rows]
    weights = [1.0 / len(a.rows) for a in answers for _ in a.rows]
    check = fit(rows, labels, features, l2=l2, weights=weights)
    scores = [support_probability(check, a.rows) for a in answers]
    truth = [a.label for a in answers]
    threshold = max(THRESHOLDS, key=lambda t: (balanced_accuracy(scores, truth, t) or 0.0, -abs(t - 0.5)))
    return LogisticCheck(
        check.features, check.mean, check.scale, check.weights, check.bias, threshold, {**about, "l2": l2}
    )
