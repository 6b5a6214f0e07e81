"""The shape of a question, without an LLM: is it several questions in one?

A small model asked to decompose a question into JSON sub-questions mostly fails (it
copies the schema, or returns the question itself), so multi-part questions are split
by rule first. :func:`split_question` splits coordinated questions ("What makes a volcano
erupt, and how do vaccines train the immune system?"), questions asked one after another
("Who wrote Hamlet? When was it first staged?") and their Arabic forms ("ما سبب ثوران
البراكين، وكيف تدرب اللقاحات جهاز المناعة؟"). A question whose parts share one question
word ("Who wrote Hamlet and Macbeth?") is one question: it is not split; nor is a
comparison ("Were X and Y of the same nationality?"), whose answer is neither part's.
"""

from __future__ import annotations

import re

_WH_EN = r"what|who|whom|whose|when|where|which|why|how"
_AUX_EN = r"is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|may|might"
_WH_AR = r"ما|ماذا|من|متى|أين|كيف|لماذا|كم|أي|هل"
#: where a second question starts inside the first: ", and how ...", "; what ...", "? Who ..."
_JOINT = re.compile(
    rf"(?:\s*,\s*(?:and|but|also)\s+|\s*;\s*(?:and\s+|but\s+|also\s+)?|\s+and\s+(?:also\s+)?|\?\s+)"
    rf"(?=(?:{_WH_EN}|{_AUX_EN})\b)"
    rf"|(?:\s*[،,؛;]\s*|\s+|؟\s*)و?(?=(?:{_WH_AR})\s)|؟\s+(?=\S)",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(rf"^(?:{_WH_EN}|{_AUX_EN})\b|^(?:{_WH_AR})\s", re.IGNORECASE)
#: at least this many words in each part: "how and why" is not two questions
_MIN_WORDS = 3


def split_question(question: str) -> list[str]:
    """The questions ``question`` asks, each ending in its question mark; ``[question]``
    when it asks one. Parts are split where a new question word or auxiliary starts a
    clause after a comma, a semicolon, "and" or a question mark, and only when every
    part is a question of three words or more."""
    text = " ".join(question.split())
    if not _QUESTION_START.match(text):
        return [question]
    pieces: list[tuple[str, str]] = []  # (the joint before it, the part)
    start, before = 0, ""
    for joint in _JOINT.finditer(text):
        pieces.append((before, text[start : joint.start()]))
        start, before = joint.end(), joint.group()
    pieces.append((before, text[start:]))
    parts = _rejoin([(j, p.strip(" ,;،؛?؟")) for j, p in pieces])
    if len(parts) < 2 or any(len(p.split()) < _MIN_WORDS or not _QUESTION_START.match(p) for p in parts):
        return [question]
    mark = "؟" if re.search(r"[\u0600-\u06ff]", text) else "?"
    return [f"{p[0].upper()}{p[1:]}{mark}" for p in parts]


def _rejoin(parts: list[tuple[str, str]]) -> list[str]:
    """The parts (each with the joint before it) with an embedded clause joined back to
    the part before it: a wh-word followed by a subject ("... about cats and how they
    hunt") starts no question, nor does a relative clause after a bare "and" ("Which
    university is in Kansas and whose campuses are in Wichita?", "the band that formed in
    1990 and who had a hit with X"): "whose", "whom" or "that", or "who", "which",
    "where" or "when" not followed by an auxiliary ("and when was it released" asks; "had"
    is not one here: "and who had a hit" is a clause), nor an auxiliary after "and" (with
    or without a comma) in a question that does not start with one ("the player who was a
    Hornet and was head coach of the Sting" is one subject's two verbs; "Is Paris in
    France and is Berlin in Germany?" asks two). Each of HotpotQA's seven split questions
    was one question of this kind."""
    joined: list[str] = []
    yes_no = bool(parts) and _AUXILIARY.match(parts[0][1]) is not None
    for joint, part in parts:
        conjunction = joint.strip(" ,").casefold()
        relative = conjunction == "and" and (
            (joint.strip() == "and" and _RELATIVE.match(part)) or (_AUXILIARY.match(part) and not yes_no)
        )
        if joined and (_EMBEDDED.match(part) or relative):
            joined[-1] = f"{joined[-1]}{joint}{part}"
        else:
            joined.append(part)
    return joined


_AUXILIARY = re.compile(rf"^(?:{_AUX_EN})\b", re.IGNORECASE)
_RELATIVE = re.compile(
    r"^(?:whose|whom|that)\b|^(?:who|which|where|when)\s+(?!(?:is|are|was|were|do|does|did|can|could|will|would)\b)",
    re.IGNORECASE,
)


_EMBEDDED = re.compile(
    rf"^(?:{_WH_EN})\s+(?:i|you|he|she|it|we|they|the|a|an|this|that|these|those|his|her|its|our|their|my)\b",
    re.IGNORECASE,
)


def is_multi_part(question: str) -> bool:
    """Whether ``question`` asks several questions (:func:`split_question`)."""
    return len(split_question(question)) > 1
