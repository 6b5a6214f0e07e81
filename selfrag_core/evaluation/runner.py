"""``evaluate``: every contender on every question, scored, compared with the baseline.

The questions run concurrently under one limit (``concurrency`` questions at a time,
every contender of a question in turn); each finished question is appended to
``results.jsonl`` at once, so an interrupted run keeps what it had (and, with a cache,
a second run replays it for free). See :mod:`selfrag_core.evaluation` for the whole.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from selfrag_core.citations import cite, supported_share, without_markers
from selfrag_core.config import config_from
from selfrag_core.display import one_line
from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.contenders import Contender, Outcome, as_contender, timed
from selfrag_core.evaluation.data import (
    CorpusDoc,
    EvalData,
    EvalQuestion,
    InputProblem,
    load_corpus,
    load_questions,
)
from selfrag_core.evaluation.metrics import (
    answer_contains_gold,
    decision_match,
    doc_ids,
    exact_match,
    mrr,
    ndcg_at_k,
    new_word_f1,
    recall_at_k,
    token_f1,
)
from selfrag_core.evaluation.report import EvalReport, MetricInfo
from selfrag_core.evaluation.settings import EvalSettings
from selfrag_core.grounding import assess, is_refusal
from selfrag_core.ingest import ingest
from selfrag_core.metrics import FaithfulnessMetric
from selfrag_core.presets import BASELINE, STRATEGIES, build_strategy, open_index, preset_of
from selfrag_core.progress import Steps, step
from selfrag_core.replay import CachedLLM
from selfrag_core.signals.fitted import shipped
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, context_text
from selfrag_core.types import RetrievedDoc
from selfrag_core.verify import checks_of, support_rows, verify_answer

if TYPE_CHECKING:
    from selfrag_core.verify import Verifier

#: the contenders of ``selfrag eval`` by default: the baseline and the four strategies
DEFAULT_CONTENDERS = (BASELINE, *STRATEGIES)
#: the namespace of the replies the contenders share (``shared_replies``) in the cache file
SHARED_NAMESPACE = "(shared by the contenders)"
#: the namespace of the judge's replies, always its own
JUDGE_NAMESPACE = "judge"
#: chunk size of a corpus indexed for an evaluation: most passages and abstracts stay whole
CORPUS_CHUNK_SIZE = 2000
#: documents of the corpus indexed (embedded) at a time
CORPUS_BATCH = 256

Progress = Callable[[int, int, str], None]

#: what runs in this context: (question id, question, contender name, its replayed-calls tally)
_ASKING: contextvars.ContextVar[tuple[str, str, str, list[int]] | None] = contextvars.ContextVar(
    "selfrag_eval_asking", default=None
)


class _Replies(CachedLLM):
    """A contender's recorded replies that also count, per question, the calls answered
    from the file (replayed or borrowed): that question's latency is not the model's."""

    def _hit(self, key: str, prompt: str, schema: Mapping[str, Any] | None) -> Any:
        found = super()._hit(key, prompt, schema)
        asking = _ASKING.get()
        if found is not None and asking is not None:
            asking[3][0] += 1
        return found


class _NameTheQuestion(logging.Filter):
    """Puts the question and the contender into the engine's fallback warnings logged
    while an evaluation runs one ("selfrag fallback in self on q3 ('What is...'): ...")."""

    def filter(self, record: logging.LogRecord) -> bool:
        asking = _ASKING.get()
        if asking is not None and isinstance(record.msg, str) and record.msg.startswith("selfrag fallback:"):
            qid, text, name, _ = asking
            short = text if len(text) <= 60 else text[:59] + "…"
            record.msg = (
                f"selfrag fallback in {name} on {qid} ({short!r}):" + record.msg[len("selfrag fallback:") :]
            )
        return True


_FALLBACK_NAMES = _NameTheQuestion()


def evaluate(
    questions: EvalData | str | os.PathLike[str] | Sequence[EvalQuestion | str],
    contenders: Sequence[str] | Mapping[str, Any] = DEFAULT_CONTENDERS,
    *,
    llm: Any = None,
    rag: Any = None,
    corpus: str | os.PathLike[str] | Sequence[CorpusDoc] | None = None,
    index: str | os.PathLike[str] | None = None,
    judge: Any = None,
    progress: Progress | None = None,
    steps: Steps | None = None,
    settings: EvalSettings | Mapping[str, Any] | None = None,
    executor: QuestionExecutor | None = None,
    **deprecated: Any,
) -> EvalReport:
    """Run every contender on every question and compare each with the baseline.

    The arguments say what the run is about; ``settings``
    (:class:`~selfrag_core.evaluation.EvalSettings`) how it runs: the baseline, ``k``,
    the contenders' sizes and limits, the cache, the sample, the concurrency, the output
    directory. The report's ``settings`` record them.

    ``questions``: a file or BEIR folder (:func:`~selfrag_core.evaluation.data.load_questions`),
    loaded data, or a list of questions. ``contenders``: names (``plain``, ``self``,
    ``recursive``, ``healing``, ..., ``file.py:Name``), or ``{name: strategy |
    LangChain runnable | LlamaIndex query engine | callable}``; the baseline must be one.
    Named contenders answer with ``llm`` over ``rag``: an index given as ``index`` (a
    directory: opened, or built there from the corpus when it holds none), or the
    data's own corpus (``corpus``, a BEIR ``corpus.jsonl``, or the BEIR / SQuAD data's)
    indexed into a temporary index. ``judge`` (an LLM) scores the faithfulness of each
    answer; its replies are recorded apart. ``progress(done, total, question)`` is
    called as each question finishes. ``steps`` (a :class:`~selfrag_core.progress.Progress`,
    or anything with its ``task`` and ``say``: :class:`~selfrag_core.progress.Steps`)
    shows the run's long steps as they go, as ``selfrag eval`` does: opening ``index``
    (a line), indexing the corpus ("indexing", documents: embedding a corpus of
    thousands of documents takes minutes), then the questions ("eval", questions).

    Metrics are computed where the data allows: answer exact match and token F1 (gold
    answers), recall@``k``, nDCG@10 and MRR of the documents each contender used
    (relevance judgements), the share of answers the grounding signals flag as
    unsupported, the share of each answer's sentences a source supports
    (:func:`~selfrag_core.citations.cite`), and with ``judge`` the judged faithfulness.
    With ``shared_replies``, a contender's latency counts only the model calls it made
    itself (``report.cache["contenders"]``).

    Before :class:`~selfrag_core.evaluation.EvalSettings`, each setting was a keyword of
    its own (``k=10``, ``cache=...``) and ``settings`` a mapping of further entries for
    the report's settings. Both still work for one release, deprecated: each such
    keyword warns and sets the field of its name (``settings={...}`` sets
    ``EvalSettings.extra``), and one that differs from a field the ``settings`` given set
    is a ConfigurationError. The parameter kept its name because the report's
    ``settings`` are what it holds.

    ``executor`` answers the questions elsewhere (:class:`QuestionExecutor`; Ray's:
    :class:`selfrag_core.evaluation.ray.RayExecutor`): each of its workers builds the
    contenders once, from the same settings, and sends back each question's records and
    the LLM calls it recorded; this process alone writes ``results.jsonl``, the report and
    the cache. None: threads here, ``concurrency`` questions at a time.
    """
    settings, given = _old_keywords(settings, deprecated)
    settings = config_from(
        EvalSettings,
        settings,
        "evaluate",
        given,
        renamed={"settings": "extra"},
        deprecated=given,
        parameter="settings",
        keep_none=True,
        strict=True,
    )
    if settings.preset is None:  # the sizes that fit the model the contenders answer with
        settings = settings.replace(preset=preset_of(llm))
    baseline, k = settings.baseline, settings.k
    data = _questions(questions).sample(settings.limit, settings.seed)
    problems = list(data.problems)
    names = list(contenders)
    if baseline not in names:
        raise ConfigurationError(f"the baseline {baseline!r} is not among the contenders {names}; add it")
    if rag is None and _needs_backend(contenders):
        rag = _backend(data, corpus, index, settings.embed, problems, steps)
    scratch, store = _replies_store(settings, llm)
    prepared = prepare(contenders, llm, rag, judge, settings, None if store is None else Path(store))
    ranking = ranks_only(data, settings.retrieval_only)
    metrics = _metrics(data, k, judge is not None, ranking, problems)
    run_settings = _run_settings(settings, ranking, executor)
    built = [c.name for c in prepared.contenders]
    report = EvalReport(data.name, run_settings, baseline, built, metrics, data.questions)
    report.problems = problems
    sink = _Sink(Path(settings.output) if settings.output is not None else None)
    logging.getLogger("selfrag").addFilter(_FALLBACK_NAMES)  # once; it acts only inside an evaluation
    report.machine = {"cpus": os.cpu_count(), "load_before": _load(), "concurrency": settings.concurrency}
    try:
        with step(steps, "eval", len(data.questions), "questions") as advance:
            finished = _recorder(report, data, prepared, sink, advance, progress)
            if executor is None:
                _run(
                    data.questions, lambda q: answer(prepared, q, ranking, k), settings.concurrency, finished
                )
            else:
                job = WorkerJob(
                    contenders, replace(settings, output=None), ranking, judge is not None, store is not None
                )
                executor.run(job, data.questions, prepared.recorded_after(0)[0], finished)
    except KeyboardInterrupt:
        report.interrupted = True  # what finished is kept: in results.jsonl and the report
        raise
    finally:
        _close_run(report, prepared, sink, settings, scratch, store)
    return report


def _needs_backend(contenders: Sequence[str] | Mapping[str, Any]) -> bool:
    """Whether a contender is named (it answers over the run's backend), not given built."""
    return not isinstance(contenders, Mapping) or any(isinstance(v, str) for v in contenders.values())


def _replies_store(
    settings: EvalSettings, llm: Any
) -> tuple[tempfile.TemporaryDirectory[str] | None, str | os.PathLike[str] | None]:
    """Where the run records its LLM calls: the cache, or with ``shared_replies`` and no
    cache a file in a scratch directory that goes away after the run (returned too)."""
    if settings.shared_replies and settings.cache is None and llm is not None:
        scratch = tempfile.TemporaryDirectory(prefix="selfrag-eval-replies-")
        return scratch, Path(scratch.name) / "replies.sqlite"
    return None, settings.cache


def _run_settings(settings: EvalSettings, ranking: bool, executor: QuestionExecutor | None) -> dict[str, Any]:
    """The settings the report records (with ``extra``'s entries, and the executor's)."""
    verifier = settings.verifier
    run_settings = {
        "k": settings.k,
        "top_k": settings.top_k,
        "preset": settings.preset,
        "retrieval_only": ranking,
        "limit": settings.limit,
        "seed": settings.seed,
        "concurrency": settings.concurrency,
        "replay": settings.replay,
        "shared_replies": settings.shared_replies,
        "verifier": "LexicalVerifier" if verifier is None else type(verifier).__name__,
        **settings.extra,
    }
    if executor is not None:
        run_settings["executor"] = executor.describe()
    return run_settings


def _recorder(
    report: EvalReport,
    data: EvalData,
    prepared: Prepared,
    sink: _Sink,
    advance: Callable[[int, str], None],
    progress: Progress | None,
) -> Callable[[Finished], None]:
    """What records a finished question, in the evaluating thread: in the report,
    ``results.jsonl`` and the cache, once whichever worker answered it; then the progress."""

    def finished(one: Finished) -> None:
        if report.results[one.index] is not None:
            return  # recorded once, whichever worker answered it
        question = data.questions[one.index]
        absorb(prepared, one)
        report.results[one.index] = one.results
        sink.write({"id": question.id, "question": question.question, "results": one.results})
        done = sum(r is not None for r in report.results)
        advance(1, one_line(question.question, 60))
        if progress is not None:
            progress(done, len(data.questions), question.question)

    return finished


def _close_run(
    report: EvalReport,
    prepared: Prepared,
    sink: _Sink,
    settings: EvalSettings,
    scratch: tempfile.TemporaryDirectory[str] | None,
    store: str | os.PathLike[str] | None,
) -> None:
    """The end of a run, finished or not: the load after it, ``results.jsonl`` closed, the
    cache's figures in the report and its files closed, the scratch directory removed, and
    the report written to the output directory."""
    report.machine["load_after"] = _load()
    sink.close()
    cached, judged = prepared.cached, prepared.judged
    every = [c for c in (*cached.values(), judged) if c is not None]
    if every:
        report.cache = {
            "path": None if scratch is not None else str(store),
            "shared_replies": settings.shared_replies,
            "hits": sum(c.hits for c in every),
            "misses": sum(c.misses for c in every),
            # each contender's calls answered from the file (``borrowed`` of them from
            # another namespace's recording: shared replies) and by the model
            "contenders": {name: _counts(c) for name, c in cached.items()},
            "judge": None if judged is None else _counts(judged),
        }
    for wrapped in every:
        wrapped.close()
    if scratch is not None:
        scratch.cleanup()
    if settings.output is not None:
        report.write(Path(settings.output))


#: evaluate()'s keywords before :class:`EvalSettings`, each now the field of its name (deprecated)
_OLD_KEYWORDS = frozenset(f.name for f in fields(EvalSettings)) - {"extra", "verifier", "support_features"}


def _old_keywords(
    settings: EvalSettings | Mapping[str, Any] | None, keywords: Mapping[str, Any]
) -> tuple[EvalSettings | None, dict[str, Any]]:
    """The ``settings`` evaluate() was given, and its deprecated keywords (``settings`` as
    a mapping among them: the report's further settings, ``EvalSettings.extra``). Another
    keyword is a TypeError, as Python raises it."""
    unknown = sorted(set(keywords) - _OLD_KEYWORDS)
    if unknown:
        raise TypeError(f"evaluate() got an unexpected keyword argument {unknown[0]!r}")
    if isinstance(settings, Mapping):
        return None, {**keywords, "settings": settings}
    return settings, dict(keywords)


# ----------------------------------------------------------------------------- where questions run


@dataclass
class Finished:
    """One question answered: its index in the run, every contender's record, and where a
    worker answered it, the replies it recorded meanwhile (rows of
    :meth:`CachedLLM.recorded_after <selfrag_core.replay.CachedLLM.recorded_after>`) and
    its cache counters' increments (``(contender name, or None for the judge, hits,
    misses, borrowed)``)."""

    index: int
    results: dict[str, dict[str, Any]]
    recorded: list[tuple[Any, ...]] = field(default_factory=list)
    counts: list[tuple[str | None, int, int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class WorkerJob:
    """What a worker needs to answer questions as this run does: the contenders (names, or
    picklable objects), the settings (no output), whether the run ranks only, whether a
    judge scores, whether replies are recorded (a cache file, or shared replies)."""

    contenders: Sequence[str] | Mapping[str, Any]
    settings: EvalSettings
    ranking: bool
    judged: bool
    records: bool


class QuestionExecutor(Protocol):
    """Answers an evaluation's questions somewhere else than this process's threads."""

    def describe(self) -> dict[str, Any]:
        """What the report's settings say of it (``summary.json``)."""
        ...

    def run(
        self,
        job: WorkerJob,
        questions: Sequence[EvalQuestion],
        replies: list[tuple[Any, ...]],
        finished: Callable[[Finished], None],
    ) -> None:
        """Every question answered once, ``finished`` called in this thread as each is
        (``replies``: the cache's recorded replies, which the workers answer from)."""
        ...


@dataclass
class Prepared:
    """The contenders of a run, built once (in this process, or in each worker), with the
    recording wrappers of their LLM (by contender name) and of the judge."""

    contenders: list[Contender]
    cached: dict[str, CachedLLM]
    judged: CachedLLM | None
    scorer: _Scorer

    def counts(self) -> list[tuple[str | None, int, int, int]]:
        pairs = [*self.cached.items(), *([] if self.judged is None else [(None, self.judged)])]
        return [(name, c.hits, c.misses, c.borrowed) for name, c in pairs]

    def recorded_after(self, rowid: int) -> tuple[list[tuple[Any, ...]], int]:
        """The cache file's replies recorded after row ``rowid`` (none without a file)."""
        handle = next(iter([*self.cached.values(), self.judged]), None)
        return ([], rowid) if handle is None else handle.recorded_after(rowid)


def prepare(
    contenders: Sequence[str] | Mapping[str, Any],
    llm: Any,
    rag: Any,
    judge: Any,
    settings: EvalSettings,
    store: Path | None,
) -> Prepared:
    """The contenders named by ``contenders``, answering with ``llm`` over ``rag`` as
    ``settings`` size them, their replies (and ``judge``'s) recorded in ``store``."""
    cached: dict[str, CachedLLM] = {}  # by contender name
    baseline, replay = settings.baseline, settings.replay

    def recorded(model: Any, namespace: str, fallbacks: tuple[str, ...] = ()) -> CachedLLM | None:
        """``model`` recording its replies under ``namespace``; None without a cache file,
        or when ``model`` is None or records already."""
        if store is None or model is None or isinstance(model, CachedLLM):
            return None
        return _Replies(model, store, replay=replay, namespace=namespace, fallback_namespaces=fallbacks)

    def contender_llm(name: str) -> Any:  # shared: one reply a prompt, for every contender
        shared = settings.shared_replies
        wrapped = recorded(llm, SHARED_NAMESPACE, (baseline, name)) if shared else recorded(llm, name)
        if wrapped is None:
            return llm
        cached[name] = wrapped
        return wrapped

    verifier = settings.verifier
    options = dict(settings.limits, top_k=settings.top_k, preset=settings.preset, verifier=verifier)
    built = _contenders(contenders, rag, contender_llm, options)
    judged = recorded(judge, JUDGE_NAMESPACE)  # the judge's replies: always its own
    faithfulness = None if judge is None else FaithfulnessMetric(judge if judged is None else judged)
    scorer = _Scorer(settings.k, faithfulness, verifier, settings.support_features)
    return Prepared(built, cached, judged, scorer)


def absorb(prepared: Prepared, one: Finished) -> None:
    """A worker's recorded replies into this process's cache file, its counters into these."""
    if one.recorded:
        handle = next(iter([*prepared.cached.values(), prepared.judged]), None)
        if handle is not None:
            handle.add_recorded(one.recorded)
    for name, hits, misses, borrowed in one.counts:
        wrapped = prepared.judged if name is None else prepared.cached.get(name)
        if wrapped is not None:
            wrapped.hits += hits
            wrapped.misses += misses
            wrapped.borrowed += borrowed


# ----------------------------------------------------------------------------- setup


def _load() -> float | None:
    """The load average over the last minute (None where the system has none: Windows)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _counts(cached: CachedLLM) -> dict[str, int]:
    return {"hits": cached.hits, "misses": cached.misses, "borrowed": cached.borrowed}


def _questions(questions: Any) -> EvalData:
    if isinstance(questions, EvalData):
        return questions
    if isinstance(questions, (str, os.PathLike)):
        return load_questions(Path(questions))
    items = [EvalQuestion(f"q{i}", q) if isinstance(q, str) else q for i, q in enumerate(questions, 1)]
    if not items:
        raise ConfigurationError("no questions to evaluate: give a questions file or a non-empty list")
    return EvalData("questions", items)


def ranks_only(data: EvalData, retrieval_only: bool | None) -> bool:
    """Whether a run ranks documents instead of answering: ``retrieval_only``, or when
    None, whether the data has relevance judgements but no answers."""
    return (data.has_relevance() and not data.has_answers()) if retrieval_only is None else retrieval_only


def has_index(index: Any) -> bool:
    """Whether ``index`` (a directory, or None) holds an index to open."""
    return index is not None and (Path(index) / "manifest.json").exists()


def corpus_documents(data: EvalData, corpus: Any, problems: list[InputProblem]) -> list[CorpusDoc]:
    """The documents to index: ``corpus`` (a file, or documents), else the data's own.
    Raises ConfigurationError when there are none."""
    docs = load_corpus(Path(corpus), problems=problems) if isinstance(corpus, (str, os.PathLike)) else corpus
    docs = data.corpus if docs is None else list(docs)
    if not docs:
        where = "the corpus" if corpus is not None or data.corpus is not None else "no corpus was given"
        raise ConfigurationError(
            f"nothing to search: {where} holds no documents; pass --index DIR (an index built with "
            "`selfrag index`) or --corpus corpus.jsonl"
        )
    return docs


def index_corpus(
    docs: Sequence[CorpusDoc], directory: Path, *, embed: str, save: bool, steps: Steps | None = None,
    label: str = "indexing",
) -> Any:  # fmt: skip
    """An embedded index in ``directory`` of ``docs`` (chunked at :data:`CORPUS_CHUNK_SIZE`,
    embedded with ``embed``), written there when ``save``; ``steps`` shows it as the step
    ``label`` counting documents (its clock runs from before the embedder loads)."""
    documents = (
        {"text": f"{d.title}\n{d.text}" if d.title else d.text, "source": d.id, "title": d.title}
        for d in docs
    )
    with step(steps, label, len(docs), "documents") as advance:
        rag = open_index(directory, create=True, embed=embed, chunk_size=CORPUS_CHUNK_SIZE)
        ingest(rag, documents, batch_size=CORPUS_BATCH, save=save, progress=advance)
    return rag


def index_in_memory(
    docs: Sequence[CorpusDoc], *, embed: str, steps: Steps | None = None, label: str = "indexing"
) -> Any:
    """:func:`index_corpus` of ``docs`` kept in memory: built in a temporary directory that
    is gone once it is built (an index that is not saved writes nothing there)."""
    with tempfile.TemporaryDirectory(prefix="selfrag-eval-") as scratch:
        return index_corpus(docs, Path(scratch) / "index", embed=embed, save=False, steps=steps, label=label)


def _backend(
    data: EvalData,
    corpus: Any,
    index: Any,
    embed: str,
    problems: list[InputProblem],
    steps: Steps | None = None,
) -> Any:
    """The index named contenders search: ``index`` when it holds one, else the corpus
    indexed (into ``index`` when given, so the next run opens it; else in memory,
    :func:`index_in_memory`)."""
    if has_index(index):
        if steps is not None:
            steps.say(f"opening the index {index}")
        return open_index(Path(index), create=False)
    docs = corpus_documents(data, corpus, problems)
    if steps is not None:
        where = f"into {index}" if index is not None else "into a temporary index (--index DIR keeps it)"
        steps.say(f"indexing the corpus: {len(docs):,} documents {where}, embedder {embed}")
    if index is None:
        return index_in_memory(docs, embed=embed, steps=steps)
    return index_corpus(docs, Path(index), embed=embed, save=True, steps=steps)


def _contenders(
    contenders: Any, rag: Any, llm_for: Callable[[str], Any], options: dict[str, Any]
) -> list[Contender]:
    items = contenders.items() if isinstance(contenders, Mapping) else ((n, n) for n in contenders)
    built = []
    for name, target in items:
        if isinstance(target, str):
            llm = llm_for(str(name))
            if llm is None:
                raise ConfigurationError(f"the contender {target!r} needs an LLM: pass llm= (--llm)")
            target = build_strategy(target, rag, llm, **options)
        built.append(as_contender(str(name), target, rag))
    if len({c.name for c in built}) < len(built):
        raise ConfigurationError("two contenders have the same name; name each once")
    return built


def _metrics(
    data: EvalData, k: int, judged: bool, ranking: bool, problems: list[InputProblem]
) -> list[MetricInfo]:
    metrics = []
    if data.has_answers() and not ranking:
        metrics += [
            MetricInfo("f1", "answer F1"),
            MetricInfo("em", "exact match"),
            MetricInfo("gold_in_answer", "gold answer in the answer"),
            MetricInfo("f1_new", "F1, new words"),
        ]
    if data.has_decisions() and not ranking:
        metrics.append(MetricInfo("decision", "yes/no decided right"))
    if data.has_relevance():
        metrics += [
            MetricInfo(f"recall@{k}", f"recall@{k}"),
            MetricInfo("ndcg@10", "nDCG@10"),
            MetricInfo("mrr", "MRR"),
        ]
    if not metrics:
        advice = "only grounding and cost are measured (add 'answers' or 'relevant' to the questions)"
        problems.append(InputProblem(data.name, f"no gold answers and no relevance judgements: {advice}"))
    if not ranking:  # what an answer is measured by
        metrics.append(MetricInfo("unsupported", "unsupported answers", higher_is_better=False))
        metrics.append(MetricInfo("sentence_support", "sentences supported"))
        metrics.append(MetricInfo("informativeness", "answering (fitted)"))
        if judged:
            metrics.append(MetricInfo("faithfulness", "faithfulness (judged)"))
    return metrics


# ----------------------------------------------------------------------------- scoring


def doc_key(doc: RetrievedDoc) -> str:
    """A document's identity for relevance: its source, else its id, else its text."""
    source = doc.metadata.get("source") or doc.metadata.get("doc_id") or doc.id
    return str(source) if source else doc.text[:200]


def _matched(keys: list[str], relevant: Mapping[str, float]) -> list[str]:
    """The keys, each replaced by the judged id it names (its file name or stem counts:
    ``notes/bees.md`` matches a judgement on ``bees.md`` or ``bees``)."""
    paths = ((key, Path(key)) for key in keys)
    return [next((c for c in (key, path.name, path.stem) if c in relevant), key) for key, path in paths]


class _Scorer:
    def __init__(
        self,
        k: int,
        faithfulness: FaithfulnessMetric | None,
        verifier: Verifier | None = None,
        support_features: bool = False,
    ) -> None:
        self.k, self.faithfulness, self.verifier = k, faithfulness, verifier
        self.support_features = support_features
        # a verifier with checks of its own (a refit): its support probability is scored too
        self.own_checks = checks_of(verifier) is not shipped()

    def support(self, question: EvalQuestion, outcome: Outcome) -> list[dict[str, float]] | None:
        """With ``support_features``, the answer's support feature rows
        (:func:`~selfrag_core.verify.support_rows`, against the full texts of the documents
        it was given) for ``fit_verifier``; None otherwise and for no answer."""
        if not self.support_features or no_answer(outcome) is not None:
            return None
        texts = [d.text for d in outcome.sources]
        return support_rows(outcome.answer, question.question, texts, self.verifier)

    def score(self, question: EvalQuestion, outcome: Outcome, answered: bool) -> dict[str, float | None]:
        scores: dict[str, float | None] = {}
        ranked = _matched(doc_ids([doc_key(d) for d in outcome.sources]), question.relevant)
        failed = no_answer(outcome) is not None  # an error or the failure placeholder: scored as no answer
        if answered:
            scores.update(_answer_scores(question, outcome, failed))
        if question.relevant:
            scores[f"recall@{self.k}"] = recall_at_k(ranked, question.relevant, self.k)
            scores["ndcg@10"] = ndcg_at_k(ranked, question.relevant, 10)
            scores["mrr"] = mrr(ranked, question.relevant, self.k)
        if answered and not failed:
            grounding = assess(
                outcome.answer,
                question.question,
                context_text(outcome.sources),
                passages=[d.text for d in outcome.sources],
                verifier=self.verifier,
            )
            scores["unsupported"] = 0.0 if grounding.supported else 1.0
            # the verifier's score (0 for a degenerate answer): the report measures how well it
            # predicts a right answer
            scores["support_score"] = 0.0 if grounding.degenerate else grounding.support_score
            # the fitted answering check's: does it answer the question (a restatement: low)
            scores["informativeness"] = 0.0 if grounding.degenerate else grounding.informativeness
            if self.own_checks:  # its support check's probability: the report gives its AUROC
                texts = [d.text for d in outcome.sources]
                verdict = verify_answer(outcome.answer, texts, self.verifier, question.question)
                scores["support_probability"] = verdict.probability
            # the share of the answer's sentences a source supports (unknown for a refusal)
            refusal = is_refusal(outcome.answer)
            citations = (
                []
                if refusal
                else cite(outcome.answer, outcome.sources, verifier=self.verifier, question=question.question)
            )
            scores["sentence_support"] = supported_share(citations)
            if self.faithfulness is not None:
                texts = [d.text for d in outcome.sources]
                scores["faithfulness"] = self.faithfulness.score(question.question, outcome.answer, texts)
        return scores


def _answer_scores(question: EvalQuestion, outcome: Outcome, failed: bool) -> dict[str, float | None]:
    """The scores of an answer against the question's gold answers and decision (0 when the
    contender ``failed``; the decision unknown when the answer takes none)."""
    scores: dict[str, float | None] = {}
    if question.answers:
        text = without_markers(outcome.answer)  # the citation markers are not the answer
        scores["f1"] = 0.0 if failed else token_f1(text, question.answers)
        scores["em"] = 0.0 if failed else exact_match(text, question.answers)
        gold = answer_contains_gold(text, question.answers, question.question)  # a pick by its pick
        scores["gold_in_answer"] = 0.0 if failed else gold
        scores["f1_new"] = 0.0 if failed else new_word_f1(text, question.answers, question.question)
    if question.decision:
        decided = decision_match(without_markers(outcome.answer), question.decision)
        scores["decision"] = None if decided is None else (0.0 if failed else decided)
    return scores


def no_answer(outcome: Outcome) -> str | None:
    """Why an outcome holds no answer (the contender failed, or its strategy returned the
    failure placeholder ``GENERATION_FAILED_ANSWER``), None when it holds one. Such an
    outcome scores 0 on the answer metrics and is counted in the summary's ``no_answers``."""
    if outcome.error is not None:
        return "error"
    if outcome.answer.strip() == GENERATION_FAILED_ANSWER:
        return "generation failed"
    return None


def record(
    question: EvalQuestion,
    outcome: Outcome,
    scores: Mapping[str, float | None],
    replayed: int = 0,
    support: list[dict[str, float]] | None = None,
) -> dict[str, Any]:
    """One contender's result on one question, as ``results.jsonl`` and the report hold it
    (``replayed``: the LLM calls answered from the cache, replayed or borrowed;
    ``support``: the answer's support feature rows, for ``--fit-verifier``)."""
    trace = outcome.trace
    timeline = [
        {"kind": e.kind, "name": e.name, "start_s": round(e.start_s, 4), "latency_s": round(e.latency_s, 4)}
        for e in ([] if trace is None else trace.events)
        if e.kind in ("llm", "retrieval")
    ]
    return {
        "answer": outcome.answer,
        "error": outcome.error,
        "sources": [
            {"id": doc_key(d), "title": str(d.metadata.get("title") or ""), "text": d.text[:300]}
            for d in outcome.sources
        ],
        "metrics": dict(scores),
        "llm_calls": outcome.llm_calls,
        "input_tokens": outcome.input_tokens,
        "output_tokens": outcome.output_tokens,
        "latency_s": round(outcome.latency_s, 6),
        "replayed_calls": replayed,
        "no_answer": no_answer(outcome),
        "fallbacks": None if trace is None else [e.name for e in trace.fallbacks],
        "timeline": timeline,
        **({} if outcome.signals is None else {"signals": outcome.signals}),  # for --fit-router
        **({} if support is None else {"support_rows": support}),  # for --fit-verifier
    }


# ----------------------------------------------------------------------------- running


def _work(contender: Contender, question: str, ranking: bool, k: int) -> Callable[[], Outcome]:
    rank = contender.rank
    if ranking and rank is not None:
        return lambda: rank(question, k)
    return lambda: contender.answer(question)


class _Sink:
    """``results.jsonl``, a line per finished question, flushed at once."""

    def __init__(self, directory: Path | None) -> None:
        self._file = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._file = (directory / "results.jsonl").open("w", encoding="utf-8")

    def write(self, line: Mapping[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(line, ensure_ascii=False) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def answer(prepared: Prepared, question: EvalQuestion, ranking: bool, k: int) -> dict[str, dict[str, Any]]:
    """Every contender of ``prepared`` on ``question``, each one's record (:func:`record`)."""
    results = {}
    for contender in prepared.contenders:
        if ranking and contender.rank is None:
            continue  # cannot rank on its own: left out of a retrieval-only run
        tally = [0]  # the calls answered from the cache while it runs
        asking = _ASKING.set((question.id, question.question, contender.name, tally))
        try:
            outcome = timed(contender.name, _work(contender, question.question, ranking, k))
            replayed = tally[0]  # before the judge's calls
            scores = prepared.scorer.score(question, outcome, not ranking)
            support = None if ranking else prepared.scorer.support(question, outcome)
        finally:
            _ASKING.reset(asking)
        results[contender.name] = record(question, outcome, scores, replayed, support)
    return results


def _run(
    questions: list[EvalQuestion],
    one: Callable[[EvalQuestion], dict[str, dict[str, Any]]],
    concurrency: int,
    finished: Callable[[Finished], None],
) -> None:
    """``one`` on every question on ``concurrency`` threads; ``finished`` (in this thread)
    as each question finishes."""
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="selfrag-eval")
    try:
        futures = {pool.submit(one, question): i for i, question in enumerate(questions)}
        for future in as_completed(futures):
            # a ConfigurationError (a miss under replay) stops the run
            finished(Finished(futures[future], future.result()))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
