"""RecursiveRAG: decompose a complex question, answer the parts together, merge.

Differences from the reference implementation, on purpose:

* The sub-questions of one decomposition are answered concurrently (one parallel
  round), so a depth-1 decomposition costs three dependent LLM rounds (decompose,
  answer, merge) whatever the breadth.
* A junk decomposition (nothing readable, empty items, copies or near-copies of the
  question, duplicates, a single item) is answered directly instead;
  ``result.reason`` says why.
* A sub-question whose answer failed stays in ``sub_answers`` with its ``error``.
* ``leaf``: another strategy (e.g. ``SelfIRAG``) may answer the leaves; it runs in
  the same query, sharing its LLM-call budget and concurrency limit.
* The recursion depth is a private parameter of the plan, not of ``query``.
* A question of several parts ("What makes a volcano erupt, and how do vaccines train
  the immune system?") is split by rule (:func:`~selfrag_core.questions.split_question`),
  without the decomposition call, with ``decomposition="rules"`` (or ``"auto"``: by rule
  when that finds parts, else by the LLM; the default ``"llm"`` is the specification's).
  With ``merge=False`` the sub-answers are joined with their citations instead of
  merged by the LLM: a small model's merge loses parts.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from selfrag_core.citations import renumber
from selfrag_core.comparison import Comparison, Quantity, comparison, decided, derived_answer, quantity
from selfrag_core.config import ExecutionConfig, RecursiveRAGConfig
from selfrag_core.engine import Generate, Note, Parallel, Plan, RetrieveMany, without_streaming
from selfrag_core.errors import RAGSystemError
from selfrag_core.grounding import content_stems
from selfrag_core.llm import LLMReply
from selfrag_core.parsing import parse_list
from selfrag_core.prompts import DECOMPOSITION_SCHEMA, Prompts, detect_language
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.questions import split_question
from selfrag_core.retrieval import _deduplicate, _doc_key
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    NOT_ENOUGH_ANSWER,
    Strategy,
    checked_answer,
    grounded_answer,
    retrieval_options,
    retrieve_and_answer,
)
from selfrag_core.types import RecursiveRAGResult, RetrievedDoc, SubAnswer

#: token-set overlap (Jaccard) at which a sub-question counts as a copy of the question
NEAR_COPY = 0.85
#: items of a decomposition read per sub-question kept (the rest is never looked at)
READ_PER_KEPT = 3
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: one-letter Arabic proclitics ("and", "so", "with", "for") stripped when matching keywords
_PROCLITICS = ("و", "ف", "ب", "ل")
_MERGE_LABELS = {"en": ("Sub-question", "Answer"), "ar": ("السؤال الفرعي", "الإجابة")}


def _tokens(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _word_forms(token: str) -> set[str]:
    forms = {token}
    if len(token) > 2 and token[0] in _PROCLITICS:
        forms.add(token[1:])
    return forms


@functools.lru_cache(maxsize=32)
def _keyword_parts(keywords: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each keyword with its word tokens (tokenised once per keyword list)."""
    return tuple((k, tuple(_tokens(k))) for k in keywords)


def matched_keywords(query: str, keywords: Sequence[str]) -> list[str]:
    """The keywords found in ``query`` as whole words (see :meth:`RecursiveRAG.is_complex`)."""
    tokens = _tokens(query)
    forms = [_word_forms(t) for t in tokens]
    present = set().union(*forms)
    found = []
    for keyword, parts in _keyword_parts(tuple(keywords)):
        n = len(parts)
        if not n or not present.issuperset(parts):
            continue
        if n == 1 or any(all(parts[j] in forms[i + j] for j in range(n)) for i in range(len(tokens) - n + 1)):
            found.append(keyword)
    return found


def _copies(item: frozenset[str], question: frozenset[str]) -> bool:
    """Whether the words of an item restate the question's: it holds every word of it,
    or nearly the same words (Jaccard >= NEAR_COPY)."""
    return bool(question) and (item >= question or len(item & question) / len(item | question) >= NEAR_COPY)


#: how a question opens when it has no question mark (English auxiliaries and wh-words, Arabic particles)
_QUESTION_OPENERS = frozenset([
    "what", "who", "whom", "whose", "when", "where", "which", "why", "how", "is", "are", "was", "were",
    "do", "does", "did", "can", "could", "will", "would", "should", "has", "have", "had", "in", "on",
    "ما", "ماذا", "من", "متى", "أين", "كيف", "لماذا", "كم", "أي", "هل", "في",
])  # fmt: skip


def _is_question(item: str) -> bool:
    """Whether ``item`` reads as a question: it ends with a question mark or opens as one
    (a timestamp, a key name or a bare phrase does not)."""
    words = _tokens(item)
    return item.rstrip().endswith(("?", "؟")) or (len(words) >= 3 and words[0] in _QUESTION_OPENERS)


def clean_decomposition(
    question: str, items: list[str], limit: int | None = None
) -> tuple[list[str], list[str]]:
    """Drop empty items, items that are not questions (timestamps, key names, fragments),
    items that share no content word with the question, copies of the question and
    duplicates; return (kept, what was dropped).

    With ``limit``, at most ``limit`` items are kept and only the first
    ``READ_PER_KEPT * limit`` are read, so the work (and the list of what was dropped)
    is bounded whatever the model wrote; the rest is dropped as "past max_sub_questions".
    """
    kept: list[str] = []
    seen: set[frozenset[str]] = set()
    dropped: list[str] = []
    question_words = frozenset(_tokens(question))
    question_stems = content_stems(question)
    read = 0
    for raw in items if limit is None else items[: READ_PER_KEPT * limit]:
        if limit is not None and len(kept) >= limit:
            break
        read += 1
        item = raw.strip()
        words = frozenset(_tokens(item))
        if not words:
            dropped.append("an empty item")
        elif not _is_question(item):
            dropped.append(f"not a question ({item[:60]!r})")
        elif question_stems and not content_stems(item) & question_stems:
            dropped.append(f"off the question ({item[:60]!r})")
        elif _copies(words, question_words):
            dropped.append(f"a copy of the question ({item[:60]!r})")
        elif words in seen:
            dropped.append(f"a duplicate ({item[:60]!r})")
        else:
            kept.append(item)
            seen.add(words)
    if read < len(items):
        dropped.append(f"{len(items) - read} past max_sub_questions")
    return kept, dropped


def _renumber_citations(sub_answers: list[SubAnswer], sources: list[RetrievedDoc]) -> None:
    """Each sub-answer's ``[n]`` markers counted in the merged ``sources`` (the merge
    copies them into the final answer, whose citations are read against ``sources``)."""
    position = {_doc_key(d): i for i, d in enumerate(sources, 1)}
    for sub in sub_answers:
        if sub.result is not None:
            local = enumerate(sub.result.sources, 1)
            sub.answer = renumber(
                sub.answer, {i: position[_doc_key(d)] for i, d in local if _doc_key(d) in position}
            )


def _joined(sub_answers: list[SubAnswer]) -> Plan[str]:
    """The sub-answers that say something, one paragraph each, their ``[n]`` markers
    already counted in the merged sources (``RecursiveRAGConfig(merge=False)``: no call)."""
    unusable = {GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER, ""}
    said = [s.answer.strip() for s in sub_answers if s.error is None and s.answer.strip() not in unusable]
    if not said:
        yield Note("all_sub_questions_failed", "no sub-question could be answered")
        return GENERATION_FAILED_ANSWER
    return "\n\n".join(said)


def _failure(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class RecursiveRAG(Strategy[RecursiveRAGResult]):
    """Recursive decomposition over any backend and any LLM.

    ``RecursiveRAG(rag_system, llm, config=None, *, execution=None, prompts=None,
    leaf=None)``; raises ``ValueError`` when ``llm`` is falsy. ``leaf`` is an optional
    strategy of this library whose plan answers every question that is not
    decomposed (its ``answer`` and ``sources`` are used). ``query`` / ``aquery`` never
    raise for backend or LLM failures: the fallback answer is returned and the
    failure is in ``result.trace``.
    """

    config: RecursiveRAGConfig

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        config: RecursiveRAGConfig | None = None,
        *,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
        leaf: Any = None,
    ) -> None:
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        if config is not None and not isinstance(config, RecursiveRAGConfig):
            raise TypeError("config must be a RecursiveRAGConfig")
        if leaf is not None and not callable(getattr(leaf, "plan", None)):
            raise TypeError("leaf must be a selfrag strategy (SelfIRAG, HyDERAG, ...) with a plan() method")
        self.config = config or RecursiveRAGConfig()
        self.leaf = leaf

    def is_complex(self, query: str) -> bool:
        """Whether ``query`` is worth decomposing: at least ``min_query_length``
        characters AND at least two distinct ``complexity_keywords``.

        Keywords match as whole words (case-insensitive, on word tokens), never as
        substrings, so "and" does not match "England" nor "how" "show". Arabic
        attaches one-letter proclitics (و، ف، ب، ل) to words, so a token also matches
        with its first letter stripped: "وكيف" matches "كيف" and "ونتائج" "نتائج". The
        conjunction "و" counts only when written as a word of its own; attached, it
        would match nearly every Arabic sentence. Multi-word keywords match as
        consecutive words.
        """
        cfg = self.config
        return (
            len(query) >= cfg.min_query_length and len(matched_keywords(query, cfg.complexity_keywords)) >= 2
        )

    def estimated_calls(self, query: str) -> float:
        """One call a part of a question it splits by rule (and the merge), else one, or
        four when it asks the LLM to decompose."""
        cfg = self.config
        parts = split_question(query) if cfg.decomposition != "llm" else [query]
        if cfg.max_depth >= 1 and len(parts) >= 2:
            return float(min(len(parts), cfg.max_sub_questions) + (1 if cfg.merge else 0))
        if cfg.max_depth < 1 or cfg.decomposition == "rules" or not self.is_complex(query):
            return 1.0
        return 4.0

    # ------------------------------------------------------------------ the plan
    def _plan(self, query: str, context: dict[str, Any]) -> Plan[RecursiveRAGResult]:
        try:
            return (yield from self._solve(query, context, 0))
        except RAGSystemError as e:
            yield Note("generation_failed", _failure(e))
            return RecursiveRAGResult(GENERATION_FAILED_ANSWER, 0, False, [], [], reason="generation failed")

    def _solve(self, query: str, context: dict[str, Any], depth: int) -> Plan[RecursiveRAGResult]:
        """Answer ``query`` at ``depth``; raises when its direct answer cannot be generated."""
        cfg = self.config
        if depth >= cfg.max_depth:
            why = "decomposition is off" if cfg.max_depth == 0 else f"max_depth {cfg.max_depth} reached"
            return (yield from self._direct(query, context, depth, why))
        compared = (comparison(query) or quantity(query)) if cfg.decomposition != "llm" else None
        if compared is not None:
            return (yield from self._compare(query, compared, context, depth))
        parts = split_question(query) if cfg.decomposition != "llm" else [query]
        if len(parts) >= 2:
            subs, reason = parts[: cfg.max_sub_questions], f"split by rule into {len(parts)} questions"
        elif cfg.decomposition == "rules":
            return (yield from self._direct(query, context, depth, "one question"))
        elif not self.is_complex(query):
            return (yield from self._direct(query, context, depth, "simple query"))
        else:
            subs, reason = yield from self._decompose(query)
        if len(subs) < 2:
            return (yield from self._direct(query, context, depth, reason))
        # sub-answers are not the final answer: their tokens must not reach a stream
        outcomes = yield Parallel(tuple(without_streaming(self._sub(s, context, depth + 1)) for s in subs))
        sub_answers = []
        for sub, outcome in zip(subs, outcomes, strict=True):
            if isinstance(outcome, Exception):
                yield Note("sub_question_failed", _failure(outcome), {"question": sub[:200]})
                sub_answers.append(SubAnswer(sub, "", depth + 1, error=_failure(outcome)))
            else:
                sub_answers.append(SubAnswer(sub, outcome.answer, depth + 1, result=outcome))
        sources = _deduplicate(d for s in sub_answers if s.result for d in s.result.sources)
        _renumber_citations(sub_answers, sources)
        answer = yield from (self._merge(query, sub_answers) if cfg.merge else _joined(sub_answers))
        if answer != GENERATION_FAILED_ANSWER:
            answer = yield from checked_answer(answer, query, sources, self.rules, self.quotes)
        return RecursiveRAGResult(answer, depth, True, subs, sub_answers, sources=sources, reason=reason)

    def _compare(
        self, query: str, compared: Comparison | Quantity, context: dict[str, Any], depth: int
    ) -> Plan[RecursiveRAGResult]:
        """A comparison by date ("Who was born first, A or B?") or by a number ("Which genus
        has more species, A or B?"): the question and each alternative searched in one
        round, one answer over their documents, and that answer replaced by the one the
        documents' dates or numbers give when they contradict it (:mod:`selfrag_core.comparison`)."""
        cfg = self.config
        searches = (query, *(f"{a} {compared.searched}".strip() for a in compared.alternatives))
        found = yield RetrieveMany(self.rag_system, searches, cfg.top_k, retrieval_options(context))
        for search, outcome in zip(searches, found, strict=True):
            if isinstance(outcome, Exception):
                yield Note("retrieval_failed", _failure(outcome), {"query": search[:200]})
        ranked = [docs for docs in found if not isinstance(docs, Exception)]
        docs = _deduplicate(d for rank in itertools.zip_longest(*ranked) for d in rank if d is not None)
        reason = "a comparison: each alternative searched"
        if not docs:
            return RecursiveRAGResult(
                NOT_ENOUGH_ANSWER, depth, False, [], [], reason=f"{reason}: no documents"
            )
        docs = docs[: cfg.top_k + len(compared.alternatives)]
        # the answer check replaces an answer the documents' dates or numbers contradict
        try:
            answer = yield from grounded_answer(self, query, docs, cfg.llm_retries)
        except RAGSystemError as e:
            decision = decided(query, [d.text for d in docs])
            if decision is None:
                raise
            evidence = "dates" if isinstance(compared, Comparison) else "numbers"
            yield Note("generation_failed", _failure(e), {"then": f"the documents' {evidence}"})
            answer = derived_answer(decision, detect_language(query))
        return RecursiveRAGResult(answer, depth, False, list(searches[1:]), [], sources=docs, reason=reason)

    def _sub(self, question: str, context: dict[str, Any], depth: int) -> Plan[RecursiveRAGResult]:
        """One sub-question, with ``sub_question`` progress notes in the trace as it starts
        and ends (what observers such as LlamaIndex's callback handlers see live)."""
        about = {"question": question, "depth": depth}
        yield Note("sub_question", None, {**about, "status": "started"}, kind="progress")
        try:
            result = yield from self._solve(question, context, depth)
        except RAGSystemError as e:
            yield Note("sub_question", _failure(e), {**about, "status": "failed"}, kind="progress")
            raise
        answered = {**about, "status": "answered", "answer": result.answer}
        yield Note("sub_question", None, answered, kind="progress")
        return result

    def _direct(
        self, query: str, context: dict[str, Any], depth: int, reason: str
    ) -> Plan[RecursiveRAGResult]:
        if self.leaf is not None:
            leaf_result = yield from self.leaf.plan(query, context)
            answer, sources = leaf_result.answer, list(leaf_result.sources)
            return RecursiveRAGResult(
                answer, depth, False, [], [], sources=sources, reason=f"{reason}: leaf strategy"
            )
        cfg = self.config
        answer, docs = yield from retrieve_and_answer(self, query, context, cfg.top_k, cfg.llm_retries)
        if answer is None:
            return RecursiveRAGResult(
                NOT_ENOUGH_ANSWER, depth, False, [], [], reason=f"{reason}: no documents"
            )
        return RecursiveRAGResult(answer, depth, False, [], [], sources=docs, reason=f"{reason}: answered")

    def _decompose(self, query: str) -> Plan[tuple[list[str], str]]:
        """Sub-questions to answer (fewer than two: answer directly) and why."""
        cfg = self.config
        prompt = self.prompts.render(
            "decompose", detect_language(query), question=query, max_sub_questions=cfg.max_sub_questions
        )
        try:
            reply: LLMReply = yield Generate(
                self.llm, prompt, "decompose", cfg.llm_retries, DECOMPOSITION_SCHEMA
            )
        except RAGSystemError as e:
            yield Note("decomposition_failed", _failure(e), {"then": "answer directly"})
            return [], "decomposition failed"
        subs, dropped = clean_decomposition(query, parse_list(reply.text), cfg.max_sub_questions)
        detail = f" (dropped {', '.join(dropped)})" if dropped else ""
        if len(subs) < 2:
            why = f"junk decomposition: {len(subs)} usable sub-question(s){detail}"
            yield Note("decomposition_unusable", why, {"raw": reply.text[:500], "then": "answer directly"})
            return [], why
        return subs, f"decomposed into {len(subs)} sub-questions{detail}"

    def _merge(self, query: str, sub_answers: list[SubAnswer]) -> Plan[str]:
        answered = [s for s in sub_answers if s.error is None]
        if not answered:
            yield Note("all_sub_questions_failed", "no sub-question could be answered")
            return GENERATION_FAILED_ANSWER
        lang = detect_language(query)
        asked, said = _MERGE_LABELS[lang]
        blocks = "\n\n".join(
            f"{asked} {i}: {s.question}\n{said}: {s.answer}" for i, s in enumerate(answered, 1)
        )
        prompt = self.prompts.render("merge", lang, question=query, sub_answers=blocks)
        try:
            reply: LLMReply = yield Generate(self.llm, prompt, "merge", self.config.llm_retries, stream=True)
            return reply.text.strip()
        except RAGSystemError as e:
            yield Note("merge_failed", _failure(e), {"then": "concatenate the sub-answers"})
            return "\n\n".join(s.answer for s in answered)
