"""Fitted checks: a logistic model over named LLM-free features, read from a JSON file.

A check's score is the probability the model gives, fitted on labelled data, so a score
of 0.7 means that about 70% of such cases were positive where it was fitted. The shipped
file, ``checks.json``, holds the support and answering checks fitted on ExpertQA's
``*_val`` claims (``benchmarks/checks_expertqa.py --fit``) and the checks fitted on the
shared tuning sets (``benchmarks/answer_choice.py --fit``,
``benchmarks/relevance_fit.py --fit``); the same scripts refit them on other data. The
model is small enough to read: the file lists each feature's mean, scale and weight, the
threshold chosen on the fitting split, and what it was fitted on.

    {"version": 1,
     "support": {"lexical": {"features": [...], "mean": [...], "scale": [...],
                             "weights": [...], "bias": -0.3, "threshold": 0.6, ...},
                 "semantic": {...}},
     "answering": {"lexical": {...}, "semantic": {...}}}

``lexical`` is used when no embedder is at hand, ``semantic`` (the same features and
the cosine of :mod:`~selfrag_core.signals.features`) when one is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError

#: the version of the checks file this code reads
VERSION = 1


@dataclass(frozen=True)
class LogisticCheck:
    """``probability(features) = 1 / (1 + exp(-(bias + sum(w * (x - mean) / scale))))``
    over the named ``features``; ``threshold``: the probability at which the check
    passes; ``about``: where it was fitted and what it scored on its report split."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float = 0.5
    about: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sizes = {len(self.features), len(self.mean), len(self.scale), len(self.weights)}
        if len(sizes) != 1:
            raise ConfigurationError("a fitted check needs one mean, scale and weight per feature")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigurationError(f"a fitted check's threshold must be in [0, 1], got {self.threshold!r}")

    def probability(self, values: Mapping[str, float]) -> float:
        """The check's probability for one row of named feature values."""
        z = self.bias + sum(
            w * (values[name] - m) / s
            for name, m, s, w in zip(self.features, self.mean, self.scale, self.weights, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "mean": [round(v, 6) for v in self.mean],
            "scale": [round(v, 6) for v in self.scale],
            "weights": [round(v, 6) for v in self.weights],
            "bias": round(self.bias, 6),
            "threshold": round(self.threshold, 4),
            "about": dict(self.about),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogisticCheck:
        try:
            return cls(
                tuple(str(f) for f in data["features"]),
                tuple(float(v) for v in data["mean"]),
                tuple(float(v) for v in data["scale"]),
                tuple(float(v) for v in data["weights"]),
                float(data["bias"]),
                float(data.get("threshold", 0.5)),
                dict(data.get("about", {})),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigurationError(
                f"not a fitted check ({type(e).__name__}: {e}): "
                "refit it with benchmarks/checks_expertqa.py --fit"
            ) from e


def fit(
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    features: Sequence[str],
    *,
    l2: float = 1.0,
    weights: Sequence[float] | None = None,
) -> LogisticCheck:
    """A logistic model of ``labels`` over the named ``features`` of ``rows``:
    standardised features, an L2 penalty ``l2`` on the weights (not the bias), fitted by
    Newton's method; ``weights``: each row's weight (None: 1)."""
    x = np.array([[float(r[f]) for f in features] for r in rows], dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if len(x) == 0 or y.min() == y.max():
        raise ValueError("fitting a check needs rows of both labels")
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    penalty = np.diag([l2] * len(features) + [0.0])
    beta = np.zeros(z.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -60, 60)))
        gradient = z.T @ (w * (p - y)) + penalty @ beta
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    return LogisticCheck(
        tuple(features),
        tuple(float(v) for v in mean),
        tuple(float(v) for v in scale),
        tuple(float(v) for v in beta[:-1]),
        float(beta[-1]),
    )


#: the kinds of check a checks file holds; the first two are required
KINDS = ("support", "answering", "choice", "relevance")


@dataclass(frozen=True)
class Checks:
    """The fitted checks of one file, by kind (:data:`KINDS`: ``support`` and
    ``answering`` always; ``choice``, between the model's answer and a quote
    (:mod:`selfrag_core.signals.choice`), and ``relevance``, of the retrieved passages to
    the question, when fitted), each with its ``lexical`` variant and (maybe) its
    ``semantic`` one."""

    kinds: Mapping[str, Mapping[str, LogisticCheck]]
    source: str = ""

    def has(self, kind: str) -> bool:
        return bool(self.kinds.get(kind))

    def pick(self, kind: str, semantic: bool) -> LogisticCheck:
        """The ``kind`` check for a caller with (``semantic``) or without an embedder."""
        variants = self.kinds.get(kind)
        if not variants:
            raise ConfigurationError(f"{self.source or 'the checks file'} has no {kind} check: refit it")
        return variants["semantic"] if semantic and "semantic" in variants else variants["lexical"]

    def with_kind(self, kind: str, variants: Mapping[str, LogisticCheck]) -> Checks:
        """These checks with the ``kind`` check replaced by ``variants``."""
        return Checks({**self.kinds, kind: dict(variants)}, self.source)

    def to_dict(self) -> dict[str, Any]:
        kinds = {kind: {name: c.to_dict() for name, c in v.items()} for kind, v in self.kinds.items() if v}
        return {"version": VERSION, **kinds}

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> Checks:
        where = source or "the checks file"
        refit = "refit it with benchmarks/checks_expertqa.py --fit"
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            raise ConfigurationError(f"{where} is not a version-{VERSION} checks file: {refit}")
        kinds = {}
        for kind in KINDS:
            variants = data.get(kind)
            if variants is None and kind not in KINDS[:2]:
                continue
            if not isinstance(variants, Mapping) or "lexical" not in variants:
                raise ConfigurationError(f"{where} has no lexical {kind} check: {refit}")
            kinds[kind] = {str(k): LogisticCheck.from_dict(v) for k, v in variants.items()}
        return cls(kinds, source)

    @classmethod
    def load(cls, path: str | Path) -> Checks:
        """The checks of the JSON file at ``path``."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            raise ConfigurationError(f"cannot read the checks file {path}: {e}") from e
        return cls.from_dict(data, str(path))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")


@lru_cache(maxsize=1)
def shipped() -> Checks:
    """The checks shipped with the library (``selfrag_core/signals/checks.json``)."""
    text = resources.files("selfrag_core.signals").joinpath("checks.json").read_text(encoding="utf-8")
    return Checks.from_dict(json.loads(text), "selfrag_core/signals/checks.json")
