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
    parts: list[str] = []
    start = 0
    for joint in _JOINT.finditer(text):
        parts.append(text[start : joint.start()])
        start = joint.end()
    parts.append(text[start:])
    parts = _rejoin([p.strip(" ,;،؛?؟") for p in parts])
    if len(parts) < 2 or any(len(p.split()) < _MIN_WORDS or not _QUESTION_START.match(p) for p in parts):
        return [question]
    mark = "؟" if re.search(r"[\u0600-\u06ff]", text) else "?"
    return [f"{p[0].upper()}{p[1:]}{mark}" for p in parts]


def _rejoin(parts: list[str]) -> list[str]:
    """``parts`` with an embedded clause ("... about cats and how they hunt") joined back
    to the part before it: a wh-word followed by a subject ("how they", "what the") starts
    no question."""
    joined: list[str] = []
    for part in parts:
        if joined and _EMBEDDED.match(part):
            joined[-1] = f"{joined[-1]} and {part}"
        else:
            joined.append(part)
    return joined


_EMBEDDED = re.compile(
    rf"^(?:{_WH_EN})\s+(?:i|you|he|she|it|we|they|the|a|an|this|that|these|those|his|her|its|our|their|my)\b",
    re.IGNORECASE,
)


def is_multi_part(question: str) -> bool:
    """Whether ``question`` asks several questions (:func:`split_question`)."""
    return len(split_question(question)) > 1
