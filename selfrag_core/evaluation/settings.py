"""``EvalSettings``: how an evaluation runs, one frozen value validated at construction.

    evaluate("questions.jsonl", ["plain", "self"], llm=llm, corpus="corpus.jsonl",
             settings=EvalSettings(limit=60, seed=1, cache="calls.sqlite", output="eval-out"))

What the run is *about* (the questions, the contenders, the model, the index, the judge)
stays :func:`~selfrag_core.evaluation.evaluate`'s arguments; how it runs is here, and
the report's ``settings`` (``summary.json``) record it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from selfrag_core.config import replaced
from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.data import check_limit
from selfrag_core.presets import BASELINE, check_embedder, profile_for
from selfrag_core.validation import check_bool, check_int, check_verifier

if TYPE_CHECKING:
    from selfrag_core.verify import Verifier


@dataclass(frozen=True)
class EvalSettings:
    """How :func:`~selfrag_core.evaluation.evaluate` runs (``selfrag eval``'s options).

    baseline: the contender every other is compared with, question by question (one of
        the contenders; default ``plain``: one retrieval, one answer).
    k: documents counted by recall@k and MRR, and ranked in a retrieval-only run.
    top_k: passages a named contender retrieves per search (None: the preset's).
    preset: the sizes of the named contenders ("small" for a small local model,
        "standard"; see ``presets.build_strategy``); None (the default): the one that fits
        the LLM, as ``selfrag eval`` picks it by ``--llm`` (:func:`~selfrag_core.presets.preset_of`:
        "small" for the embedded ``LocalLLM``, "standard" for a model that declares no
        profile, such as a LangChain chat model). The report records the one used.
    limits: what bounds each question of a named contender: ``max_llm_calls``,
        ``llm_timeout``, ``query_timeout`` (and ``router``, ``call_budget`` for
        ``adaptive``), as ``build_strategy`` takes them; a copy is kept.
    retrieval_only: rank ``k`` documents instead of answering, for the contenders that
        can (a strategy whose ``ranking()`` is not None); None: when the data has relevance judgements but no
        answers.
    cache: a SQLite file every LLM call (the model's and the judge's) is recorded in and
        replayed from (:class:`~selfrag_core.replay.CachedLLM`), each contender's
        replies apart (its namespace is its name); None: no recording.
    replay: a call the cache does not hold is an error (for CI).
    shared_replies: one prompt gets one reply in every contender (the baseline's
        recording, else the contender's own, else the model's; without ``cache``, in a
        temporary file), so a difference between contenders comes from what they send,
        and a contender's latency counts only the model calls it made itself. The
        judge's replies are always recorded apart.
    concurrency: questions answered at once (every contender of a question in turn).
    limit: a sample of that many questions drawn with ``seed``, kept in file order;
        None: every question.
    seed: the seed of the sample and of the bootstrap intervals.
    output: a directory for ``results.jsonl`` (written as questions finish),
        ``summary.json`` and ``report.html``; None: nothing written.
    embed: the embedder of an index built from the corpus (one of ``presets.EMBEDDERS``:
        "auto", "none", ...).
    verifier: what decides support, for the named contenders (each built with it, as
        ``build_strategy(..., verifier=)``) and for the harness's own ``unsupported``,
        ``support_score`` and ``sentence_support`` metrics, so they judge with the
        verifier the strategies decide with (a :class:`~selfrag_core.verify.Verifier`;
        None: the LLM-free ``LexicalVerifier``). The report's ``settings`` name its class.
        A contender you pass as an object keeps its own. A verifier with fitted checks of
        its own (``LexicalVerifier(checks=...)``, ``--verifier FILE.json``) also has its
        answers' support ``probability`` scored (``support_probability``), whose AUROC the
        report gives beside the score's.
    support_features: record each answer's support feature rows
        (:func:`~selfrag_core.verify.support_rows`) in its record (``support_rows`` in
        ``results.jsonl``), what :func:`~selfrag_core.evaluation.verifier_fit.fit_verifier`
        (``selfrag eval --fit-verifier``) refits the support check on.
    extra: further entries for the report's ``settings`` (``summary.json``), which the
        run does not read: ``selfrag eval`` records the model, the generation options and
        ``--offset``. An entry that names a setting the report records replaces it
        there. A copy is kept.

    A bad value raises ConfigurationError at construction, with the message
    ``evaluate`` gave it. ``replace(**changes)``: a copy with those fields changed,
    validated.
    """

    baseline: str = BASELINE
    k: int = 10
    top_k: int | None = 3
    preset: str | None = None
    limits: Mapping[str, Any] = field(default_factory=dict, hash=False)
    retrieval_only: bool | None = None
    cache: str | os.PathLike[str] | None = None
    replay: bool = False
    shared_replies: bool = False
    concurrency: int = 2
    limit: int | None = None
    seed: int = 0
    output: str | os.PathLike[str] | None = None
    embed: str = "auto"
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    verifier: Verifier | None = field(default=None, compare=False, repr=False)
    support_features: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.baseline, str) or not self.baseline:
            raise ConfigurationError(f"baseline must be a contender's name, got {self.baseline!r}")
        check_int("k", self.k, 1)
        if self.top_k is not None:
            check_int("top_k", self.top_k, 1)
        if self.preset is not None:
            profile_for(self.preset)  # an unknown preset raises, naming the known ones
        for name in ("limits", "extra"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigurationError(f"{name} must be a mapping, got {type(value).__name__}")
            object.__setattr__(self, name, dict(value or {}))
        if self.retrieval_only is not None:
            check_bool("retrieval_only", self.retrieval_only)
        for name in ("cache", "output"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigurationError(f"{name} must be a path or None, got {type(value).__name__}")
        check_bool("replay", self.replay)
        check_bool("shared_replies", self.shared_replies)
        check_int("concurrency", self.concurrency, 1)
        check_limit(self.limit)
        check_int("seed", self.seed, None)
        check_embedder(self.embed)
        check_verifier(self.verifier)
        check_bool("support_features", self.support_features)

    def replace(self, **changes: Any) -> EvalSettings:
        return replaced(self, **changes)
