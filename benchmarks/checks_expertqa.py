"""The fitted checks on ExpertQA's human labels: fit on ``*_val``, report on ``*_test``.

ExpertQA (Malaviya et al., 2024; ``chaitanyamalaviya/ExpertQA``, ``data/lfqa``) splits
expert questions' answers into claims, each with its evidence passages and human labels
for support (Complete, Partial, Incomplete) and informativeness (Very relevant ...
Uninformative). Fetch the four files first (never committed)::

    bash benchmarks/fetch_expertqa.sh data/expertqa

Report (the default): per check, on the ``*_test`` claims, which no fit or threshold
here ever reads,

* support: AUROC of Complete against Partial/Incomplete; balanced accuracy at the
  shipped threshold; the share of Complete claims certified; the share of claims
  certified against another question's evidence; the expected calibration error and a
  reliability table (ten bins: mean score against the share supported);
* answering: AUROC of Very relevant against Uninformative;

for the lexical verifier's score (the rules, :func:`selfrag_core.verify.verify_answer`)
and the fitted checks (:mod:`selfrag_core.signals.fitted`, the shipped
``checks.json``), with and without the question, with ``--embedder local`` also the
variants over the MiniLM cosine::

    .venv/bin/python benchmarks/checks_expertqa.py data/expertqa [--embedder local]

Fit (what produced ``selfrag_core/signals/checks.json``; reads ``*_val`` only): the
support check on each claim against its own evidence (labelled) and against another
question's (unsupported), the answering check on Very relevant against Uninformative;
the L2 penalty and the threshold chosen by five-fold cross-validation on ``*_val``
(the threshold: the best balanced accuracy whose out-of-fold share of cross-evidence
claims certified is at most 5%)::

    .venv/bin/python benchmarks/checks_expertqa.py data/expertqa --embedder local \\
        --fit selfrag_core/signals/checks.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.evaluation.metrics import auroc
from selfrag_core.signals.features import (
    ANSWERING_FEATURES,
    SEMANTIC,
    SUPPORT_FEATURES,
    answering_features,
    support_features,
)
from selfrag_core.signals.fitted import Checks, LogisticCheck, fit, shipped
from selfrag_core.verify import DEFAULT, best, verify_answer

VAL, TEST = ("rand_val", "domain_val"), ("rand_test", "domain_test")
SUPPORT = {"Complete": True, "Partial": False, "Incomplete": False}
INFORMATIVE = {"Very relevant": True, "Uninformative": False}
MAX_CROSS_CERTIFIED = 0.05


@dataclass
class Claim:
    question: str
    text: str
    evidence: list[str]
    support: bool | None
    informative: bool | None
    other: list[str]  # another question's evidence


def load(folder: Path, names: Sequence[str], seed: int) -> list[Claim]:
    claims = []
    for name in names:
        path = folder / f"{name}.jsonl"
        if not path.exists():
            sys.exit(f"{path} is missing: bash benchmarks/fetch_expertqa.sh {folder}")
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            for answer in record["answers"].values():
                for c in answer["claims"]:
                    evidence = [e.split("\n\n", 1)[-1] for e in c.get("evidence") or []]
                    claims.append(
                        Claim(
                            record["question"],
                            c["claim_string"],
                            evidence,
                            SUPPORT.get(c.get("support") or "") if evidence else None,
                            INFORMATIVE.get(c.get("informativeness") or ""),
                            [],
                        )
                    )
    rng = random.Random(seed)
    pool = [c for c in claims if c.evidence]
    for c in pool:
        other = rng.choice(pool)
        while other.question == c.question:
            other = rng.choice(pool)
        c.other = other.evidence
    return claims


def _lexical(claim: str, passages: list[str], question: str = "") -> float:
    rows = DEFAULT.verify([claim], passages, question)
    return best(rows[0]).score if rows and passages else 0.0


def support_rows(claims: list[Claim], embed: Any, cross: bool) -> list[dict[str, float]]:
    rows = []
    for c in claims:
        passages = c.other if cross else c.evidence
        rows.append(support_features(c.text, passages, _lexical(c.text, passages), embed))
    return rows


def answering_rows(claims: list[Claim], embed: Any) -> list[dict[str, float]]:
    return [answering_features(c.text, c.question, embed, c.evidence) for c in claims]


# ----------------------------------------------------------------------------- figures


def balanced_accuracy(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> float:
    s, y = np.asarray(scores), np.asarray(labels, dtype=bool)
    tpr = float((s[y] >= threshold).mean()) if y.any() else 0.0
    tnr = float((s[~y] < threshold).mean()) if (~y).any() else 0.0
    return (tpr + tnr) / 2


def calibration(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> tuple[float, list[str]]:
    """The expected calibration error and a reliability table, ten equal-width bins."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    which = np.minimum((s * bins).astype(int), bins - 1)
    error, table = 0.0, []
    for b in range(bins):
        inside = which == b
        if not inside.any():
            continue
        gap = abs(s[inside].mean() - y[inside].mean())
        error += inside.mean() * gap
        table.append(
            f"      [{b / bins:.1f}, {(b + 1) / bins:.1f})  n {int(inside.sum()):>4}  "
            f"mean score {s[inside].mean():.2f}  supported {y[inside].mean():.2f}"
        )
    return float(error), table


def report_support(
    name: str, own: list[float], cross: list[float], labels: list[bool], threshold: float
) -> None:
    area = auroc(own, labels)
    complete = [s for s, y in zip(own, labels, strict=True) if y]
    certified = sum(s >= threshold for s in complete) / len(complete)
    crossed = sum(s >= threshold for s in cross) / len(cross)
    ece, table = calibration(own, labels)
    print(
        f"  {name:<34} AUROC {area:.3f}  balanced acc. {balanced_accuracy(own, labels, threshold):.3f} "
        f"at {threshold:.2f}  Complete certified {certified:.0%}  cross-evidence certified {crossed:.1%}  "
        f"ECE {ece:.3f}"
    )
    if "fitted" in name:
        print("\n".join(table))


def predict(check: LogisticCheck, rows: list[dict[str, float]]) -> list[float]:
    return [check.probability(r) for r in rows]


# ----------------------------------------------------------------------------- fitting


def _folds(n: int, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i::k] for i in range(k)]


def cross_validated(
    rows: list[dict[str, float]], labels: list[bool], features: Sequence[str], l2: float
) -> np.ndarray:
    """Out-of-fold probabilities of a check fitted with penalty ``l2``."""
    out = np.zeros(len(rows))
    for held in _folds(len(rows)):
        keep = np.setdiff1d(np.arange(len(rows)), held)
        check = fit([rows[i] for i in keep], [labels[i] for i in keep], features, l2=l2)
        out[held] = [check.probability(rows[i]) for i in held]
    return out


def fit_support(claims: list[Claim], embed: Any, features: Sequence[str]) -> LogisticCheck:
    labelled = [c for c in claims if c.support is not None]
    own = support_rows(labelled, embed, cross=False)
    cross = support_rows(labelled, embed, cross=True)
    rows, labels = own + cross, [bool(c.support) for c in labelled] + [False] * len(cross)
    n = len(own)
    best_l2, best_area, best_oof = 1.0, -1.0, np.zeros(0)
    for l2 in (0.1, 1.0, 10.0, 100.0):
        oof = cross_validated(rows, labels, features, l2)
        area = auroc(list(oof[:n]), labels[:n]) or 0.0
        if area > best_area:
            best_l2, best_area, best_oof = l2, area, oof
    threshold = _threshold(best_oof[:n], labels[:n], best_oof[n:])
    check = fit(rows, labels, features, l2=best_l2)
    about = {
        "fitted_on": "ExpertQA rand_val + domain_val: each claim against its own evidence (human support "
        "label: Complete) and against another question's (unsupported)",
        "claims": n,
        "l2": best_l2,
        "cross_validated_auroc": round(best_area, 4),
    }
    return LogisticCheck(check.features, check.mean, check.scale, check.weights, check.bias, threshold, about)


def _threshold(own: np.ndarray, labels: list[bool], cross: np.ndarray) -> float:
    """The threshold with the best balanced accuracy on ``own`` whose share of ``cross``
    certified is at most :data:`MAX_CROSS_CERTIFIED`."""
    best_t, best_ba = 0.5, -1.0
    for t in np.round(np.arange(0.05, 0.96, 0.01), 2):
        if (cross >= t).mean() > MAX_CROSS_CERTIFIED:
            continue
        ba = balanced_accuracy(list(own), labels, float(t))
        if ba > best_ba:
            best_t, best_ba = float(t), ba
    return best_t


def fit_answering(claims: list[Claim], embed: Any, features: Sequence[str]) -> LogisticCheck:
    labelled = [c for c in claims if c.informative is not None]
    rows, labels = answering_rows(labelled, embed), [bool(c.informative) for c in labelled]
    best_l2, best_area, best_oof = 1.0, -1.0, np.zeros(0)
    for l2 in (0.1, 1.0, 10.0, 100.0):
        oof = cross_validated(rows, labels, features, l2)
        area = auroc(list(oof), labels) or 0.0
        if area > best_area:
            best_l2, best_area, best_oof = l2, area, oof
    # the threshold: the best out-of-fold balanced accuracy (most claims answer: 0.5 passes nearly all)
    y = np.asarray(labels, dtype=bool)
    candidates = np.round(np.arange(0.05, 0.96, 0.01), 2)
    threshold = max(candidates, key=lambda t: balanced_accuracy(list(best_oof), labels, float(t)))
    check = fit(rows, labels, features, l2=best_l2)
    about = {
        "fitted_on": "ExpertQA rand_val + domain_val claims: informativeness Very relevant "
        "against Uninformative",
        "claims": len(rows),
        "l2": best_l2,
        "cross_validated_auroc": round(best_area, 4),
        # how far apart the two classes lie (out of fold): a drop this large in informativeness
        # is a step from an answer toward no answer (verify.answers_as_well)
        "margin": round(float(best_oof[y].mean() - best_oof[~y].mean()), 4),
    }
    return LogisticCheck(
        check.features, check.mean, check.scale, check.weights, check.bias, float(threshold), about
    )


# ----------------------------------------------------------------------------- main


def _embedder(name: str | None) -> Callable[[list[str]], Any] | None:
    if name is None:
        return None
    from selfrag_core.local import LocalEmbeddings

    model = LocalEmbeddings()
    cache: dict[str, Any] = {}

    def embed(texts: list[str]) -> Any:  # windows recur across claims of one answer: encode each once
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            cache.update(zip(missing, model.embed_documents(missing), strict=True))
        return np.stack([cache[t] for t in texts])

    return embed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the ExpertQA files (benchmarks/fetch_expertqa.sh DIR)")
    parser.add_argument("--embedder", choices=["local"], help="also the variants over the MiniLM cosine")
    parser.add_argument("--fit", type=Path, metavar="FILE", help="fit on *_val and write the checks file")
    parser.add_argument(
        "--kind", action="append", choices=["support", "answering"], help="with --fit: refit only this check"
    )
    parser.add_argument("--checks", type=Path, help="report this checks file (default: the shipped one)")
    args = parser.parse_args()
    embed = _embedder(args.embedder)
    if args.fit:
        claims = load(args.folder, VAL, seed=0)
        # the file's other checks (relevance: benchmarks/relevance_fit.py) are kept
        checks = Checks.load(args.fit) if args.fit.exists() else Checks({})
        for kind in args.kind or ("support", "answering"):
            fitter = fit_support if kind == "support" else fit_answering
            features = SUPPORT_FEATURES if kind == "support" else ANSWERING_FEATURES
            variants = {"lexical": fitter(claims, None, features)}
            if embed is not None:
                variants["semantic"] = fitter(claims, embed, (*features, SEMANTIC))
            checks = checks.with_kind(kind, variants)
        checks.save(args.fit)
        print(f"wrote {args.fit}")
        return
    checks = Checks.load(args.checks) if args.checks else shipped()
    claims = load(args.folder, TEST, seed=1)
    labelled = [c for c in claims if c.support is not None]
    labels = [bool(c.support) for c in labelled]
    share = sum(labels) / len(labels)
    print(f"ExpertQA *_test: {len(labelled)} claims with a support label ({share:.0%} Complete)")
    print("support (Complete against Partial/Incomplete; cross: against another question's evidence)")
    for question in (False, True):
        asked = " with question=" if question else ""
        own = [
            verify_answer(c.text, c.evidence, question=c.question if question else "").score or 0.0
            for c in labelled
        ]
        cross = [
            verify_answer(c.text, c.other, question=c.question if question else "").score or 0.0
            for c in labelled
        ]
        report_support(f"rules (verify_answer .score){asked}", own, cross, labels, DEFAULT.threshold)
    for variant, use in (("lexical", None), ("semantic", embed)):
        if variant == "semantic" and use is None:
            continue
        check = checks.pick("support", variant == "semantic")
        own = predict(check, support_rows(labelled, use, cross=False))
        cross = predict(check, support_rows(labelled, use, cross=True))
        report_support(f"fitted support, {variant}", own, cross, labels, check.threshold)
    rated = [c for c in claims if c.informative is not None]
    informative = [bool(c.informative) for c in rated]
    print(f"answering (Very relevant against Uninformative, {len(rated)} claims)")
    rules = [verify_answer(c.text, c.evidence, question=c.question).score or 0.0 for c in rated]
    print(f"  {'rules (verify_answer .score, question=)':<34} AUROC {auroc(rules, informative):.3f}")
    for variant, use in (("lexical", None), ("semantic", embed)):
        if variant == "semantic" and use is None:
            continue
        check = checks.pick("answering", variant == "semantic")
        scores = predict(check, answering_rows(rated, use))
        print(
            f"  {'fitted answering, ' + variant:<34} AUROC {auroc(scores, informative):.3f}  balanced acc. "
            f"{balanced_accuracy(scores, informative, check.threshold):.3f} at {check.threshold:.2f}"
        )


if __name__ == "__main__":
    main()
