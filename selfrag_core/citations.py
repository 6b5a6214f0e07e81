"""Citations: which source each sentence of an answer cites, and which sources support it.

:func:`cite` splits an answer into sentences, reads the ``[n]`` / ``[n, m]`` markers the
model wrote after each, and checks every source against the sentence on its own with the
claim-level verifier (:mod:`selfrag_core.verify`; LLM-free by default). A sentence that cites nothing
is attributed to the source that supports it best (marked ``attributed``), so a model
that ignores the instruction to cite still gets citations.

Nothing here raises on odd input: a marker that points to no source (any bracketed
integer but 1 to the number of sources: ``[7]`` with five sources, ``[0]``, ``[-1]``,
``[12345]``) is flagged and removed like any marker; a marker in another shape (``【1】``,
``(1)``, ``[^1]``) is flagged and kept as the model wrote it; a sentence no source
supports is flagged. Markers written together (``[1][2]``, ``[1], [2]``) and the brackets
or parentheses around nothing but markers (``[[1]]``, ``[[1], [2]]``, ``([1])``) are
removed as one. Markers inside code (`` `...` `` or fenced blocks) are code, not markers.

An optional LLM check reuses the faithfulness judge's one call, which splits the answer
into claims and judges each: :func:`check_with_claims` maps every judged claim to the
sentence it shares most content words with and sets that sentence's ``llm_supported``
(and the flag ``llm_unsupported`` when the judge rejects a claim of it). SelfHealingRAG
does this for the attempt it returns, from the call it made to score it. For any other
result it costs that one call::

    judged = FaithfulnessMetric(llm).judge(question, result.answer, [d.text for d in result.sources])
    result.citations = check_with_claims(result.citations, judged.claims)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from selfrag_core.grounding import content_stems, content_tokens
from selfrag_core.protocols import Verdict
from selfrag_core.signals.text import sentence_spans, strip_markup
from selfrag_core.types import Citation, RetrievedDoc
from selfrag_core.verify import DEFAULT, Verifier

#: support at which a source counts as supporting a sentence
SUPPORT_THRESHOLD = 0.5
#: ``[1]``, ``[1, 2]``, ``[1][2]`` (each bracket a marker), of any integers (``[0]``, ``[-1]``, ``[12345]``)
_MARKER = re.compile(r"\[\s*(-?\d+(?:\s*[,;]\s*-?\d+)*)\s*\]")
#: digits beyond which a number names no source (and is not converted: Python refuses
#: integers of thousands of digits)
_MAX_DIGITS = 9
#: what separates the markers of one group (``[1][2]``, ``[1], [2]``)
_BETWEEN = frozenset(" \t,;")
#: the brackets that may wrap a group of markers and nothing else (``[[1]]``, ``([1])``)
_WRAPS = {"[": "]", "(": ")"}
#: markers of other shapes, flagged and left as they are
_ODD_MARKER = re.compile(
    r"【\s*\d{1,3}\s*】|\(\s*\d{1,3}\s*\)|\[\^\s*\d{1,3}\s*\]|\[\s*(?:source|doc)\w*\s*\d{1,3}\s*\]", re.I
)
#: the verifier's reasons that name nothing in particular (not repeated as flags)
_VAGUE = frozenset({"low_overlap", "no_passage", "no_content", "not_entailed"})
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.S)


def _blank_code(text: str) -> str:
    """``text`` with code replaced by spaces (same length: offsets stay valid)."""
    return _CODE.sub(lambda m: " " * len(m.group()), text)


def cite(
    answer: str,
    sources: Sequence[RetrievedDoc],
    *,
    threshold: float = SUPPORT_THRESHOLD,
    verifier: Verifier | None = None,
    question: str = "",
) -> list[Citation]:
    """The citations of ``answer`` against ``sources`` (see the module docstring): each
    sentence (:func:`~selfrag_core.verify.sentence_spans`: lists, markup and wrapped lines
    split right) checked by ``verifier`` (the default claim-level
    :class:`~selfrag_core.verify.LexicalVerifier`) against each source on its own; a
    source supports it at a score of ``threshold`` or more. An unsupported sentence is
    flagged ``unsupported`` and with the verifier's reason (``number_not_in_source:2019``).
    ``question``: what the answer answers; its own names and numbers are given, not
    claimed ("79 characters" to "What line length does PEP 8 recommend?" claims no "8")."""
    texts = [d.text for d in sources]
    scan = _blank_code(answer)
    citations = []
    for start, end in sentence_spans(scan):
        citation = _sentence(answer, scan, start, end, len(texts))
        if citation is not None:
            citations.append(citation)
    rows = (verifier or DEFAULT).verify([c.sentence for c in citations], texts, question) if citations else []
    for citation, row in zip(citations, rows, strict=True):
        _judge(citation, row, threshold)
    return citations


def _sentence(answer: str, scan: str, start: int, end: int, sources: int) -> Citation | None:
    """The citation of the sentence ``answer[start:end]`` before it is checked: its text
    without markers, the sources it cites (of ``sources``) and its odd or unknown markers;
    None when it says nothing (punctuation, a marker alone, code alone)."""
    groups = _groups(scan, start, end)
    spans = [(begin - start, finish - start) for begin, finish, _ in groups]
    if not content_tokens(strip_markup(_without(scan[start:end], spans))):
        return None
    sentence = strip_markup(_without(answer[start:end], spans))
    cited: list[int] = []
    flags = [f"odd_marker:{m.group().strip()}" for m in _ODD_MARKER.finditer(scan, start, end)]
    for written in (n for *_, numbers in groups for n in numbers):
        number = _number(written)
        if number is None or not 1 <= number <= sources:
            flags.append(f"no_such_source:[{written if number is None else number}]")
        elif number not in cited:
            cited.append(number)
    return Citation(sentence, start, end, cited, flags=flags, attributed=not cited)


def _judge(citation: Citation, row: Sequence[Verdict], threshold: float) -> None:
    """Fill in ``citation``'s support from the verifier's ``row`` (a verdict per source):
    the sources it cites that support it (a sentence that cites nothing: the one source
    that supports it best), its best score, and ``unsupported`` with the reason."""
    candidates = [row[n - 1] for n in citation.cited] if citation.cited else row
    ranked = sorted(candidates, key=lambda v: -v.score)
    supporting = [v.passage + 1 for v in ranked if v.score >= threshold and v.passage is not None]
    citation.supported_by = supporting[:1] if citation.attributed else supporting
    citation.support = ranked[0].score if ranked else 0.0
    if not citation.supported_by:
        citation.flags.append("unsupported")
        reason = ranked[0].reason if ranked else None
        if reason and reason not in _VAGUE:
            citation.flags.append(reason)  # what disagrees: "number_not_in_source:2019"


def _groups(scan: str, start: int, end: int) -> list[tuple[int, int, list[str]]]:
    """The groups of markers in ``scan[start:end]`` as ``(begin, end, numbers as written)``:
    markers with only blanks, commas or semicolons between them, with the brackets or
    parentheses that wrap nothing else (so that removing a group leaves no debris)."""
    groups: list[tuple[int, int, list[str]]] = []
    for marker in _MARKER.finditer(scan, start, end):
        numbers = [n.strip() for n in re.split(r"[,;]", marker.group(1))]
        if groups and _BETWEEN.issuperset(scan[groups[-1][1] : marker.start()]):
            begin, _, before = groups.pop()
            groups.append((begin, marker.end(), before + numbers))
        else:
            groups.append((marker.start(), marker.end(), numbers))
    return [_unwrapped(scan, start, end, *group) for group in groups]


def _unwrapped(
    scan: str, start: int, end: int, begin: int, finish: int, numbers: list[str]
) -> tuple[int, int, list[str]]:
    """A group of markers widened to the brackets that wrap it alone (``[[1]]``, ``([1])``)."""
    while True:
        left, right = begin, finish
        while left > start and scan[left - 1].isspace():
            left -= 1
        while right < end and scan[right].isspace():
            right += 1
        if left == start or right == end or _WRAPS.get(scan[left - 1]) != scan[right]:
            return begin, finish, numbers
        begin, finish = left - 1, right + 1


def _number(written: str) -> int | None:
    """The integer a marker writes, or None when it is too long to name any source."""
    return int(written) if len(written.lstrip("-")) <= _MAX_DIGITS else None


def _without(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the marker ``spans`` (in order; and the blanks before them), on one line."""
    pieces, position = [], 0
    for begin, finish in spans:
        pieces.append(text[position:begin].rstrip())
        position = finish
    pieces.append(text[position:])
    return " ".join("".join(pieces).split())


def renumber(answer: str, numbers: Mapping[int, int]) -> str:
    """``answer`` with the numbers of its ``[n]`` markers (outside code) mapped through
    ``numbers``: a sub-answer's markers counted in the merged list of sources. A number
    the mapping does not hold stays as it is."""
    pieces, position = [], 0
    for marker in _MARKER.finditer(_blank_code(answer)):
        written = [n.strip() for n in re.split(r"[,;]", marker.group(1))]
        mapped = (str(numbers.get(n, n)) if (n := _number(w)) is not None else w for w in written)
        pieces += [answer[position : marker.start()], "[", ", ".join(mapped), "]"]
        position = marker.end()
    return "".join(pieces) + answer[position:]


def without_markers(answer: str) -> str:
    """``answer`` without its ``[n]`` markers (outside code): the text an answer metric
    such as SQuAD's F1 should score."""
    scan = _blank_code(answer)
    return _without(answer, [(begin, finish) for begin, finish, _ in _groups(scan, 0, len(scan))])


def supported_share(citations: Sequence[Citation]) -> float | None:
    """The share of sentences that some source supports (None for an answer without sentences)."""
    return sum(1 for c in citations if c.supported) / len(citations) if citations else None


def check_with_claims(citations: Sequence[Citation], claims: Sequence[tuple[str, bool]]) -> list[Citation]:
    """``citations`` checked against an LLM judge's ``(claim, supported)`` verdicts (the
    ``claims`` of a :class:`~selfrag_core.metrics.FaithfulnessScore`): each claim goes to
    the sentence it shares the most content words with (word stems, Arabic proclitics
    stripped; on a tie, the sentence it covers more of, then the first), and a claim
    sharing none with any sentence is ignored. A sentence that received claims gets
    ``llm_supported`` (True when the judge supported every one of them) and, when not,
    the flag ``llm_unsupported``; the others are returned as they were. The input is
    not modified."""
    stems = [content_stems(c.sentence) for c in citations]
    verdicts: dict[int, list[bool]] = {}
    for claim, supported in claims:
        words = content_stems(claim)
        overlaps = [(len(words & s), len(words & s) / len(s) if s else 0.0) for s in stems]
        best = max(range(len(overlaps)), key=lambda i: overlaps[i], default=None)
        if best is not None and overlaps[best][0] > 0:
            verdicts.setdefault(best, []).append(supported)
    checked = list(citations)
    for i, judged in verdicts.items():
        flags = list(checked[i].flags)
        if not all(judged) and "llm_unsupported" not in flags:
            flags.append("llm_unsupported")
        checked[i] = replace(checked[i], flags=flags, llm_supported=all(judged))
    return checked
