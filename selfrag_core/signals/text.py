"""Text once, for every check: tokens, stems, names, negations and sentences.

The support check (:mod:`selfrag_core.verify`), the fitted checks
(:mod:`selfrag_core.signals.features`) and the citations read text through these
functions, so a word is the same word everywhere: NFKC-normalised and case-folded
tokens (``"2.25"`` and ``"1,000"`` stay one), stems of five letters once an English
inflection is cut, Arabic proclitics stripped; sentences that survive lists, markup,
wrapped lines, decimals and abbreviations.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from selfrag_core.grounding import STOPWORDS, strip_ar_prefix

_WORD = re.compile(r"[^\W_]+(?:[.,]\d+)*", re.UNICODE)  # "2.25" and "1,000" stay one token
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_TAG = re.compile(r"<\s*(/?)\s*([A-Za-z][A-Za-z0-9]*)[^<>]{0,200}>")
_BLOCK_TAGS = frozenset(
    {"p", "br", "li", "ul", "ol", "div", "tr", "td", "h1", "h2", "h3", "h4", "h5", "h6", "hr"}
)
#: a list item's marker at the start of a line: "1.", "2)", "-", "*", "•", "+"
_ITEM = re.compile(r"(?m)^[ \t]*(?:\d{1,3}[.)]|[-*•+]|#{1,6})[ \t]+")
#: citation markers, of the expected shape ("[1]", "[1, 2]") and others ("【1】", "[^1]", "[source 1]", "(1)")
MARKER = re.compile(
    r"\s*(?:\[\s*-?\d+(?:\s*[,;]\s*-?\d+)*\s*\]|【\s*\d{1,3}\s*】|\[\^\s*\d{1,3}\s*\]"
    r"|\[\s*(?:source|doc)\w*\s*\d{1,3}\s*\]|\(\s*\d{1,2}\s*\)(?=\s*(?:[.!?؟,;]|$)))",
    re.IGNORECASE,
)
_ABBREVIATIONS = frozenset([
    "mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "vs", "etc", "eg", "ie", "al", "inc", "ltd",
    "co", "fig", "no", "vol", "ch", "pp", "approx", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec", "v", "mt", "ft", "gen", "gov", "sen", "rev", "capt", "col", "lt",
])  # fmt: skip
#: words that only frame a claim: missing from a passage, they are weak evidence against it
GENERIC = frozenset([
    "also", "including", "include", "includes", "included", "known", "called", "named", "several",
    "many", "various", "other", "others", "main", "important", "different", "first", "second",
    "new", "well", "however", "although", "because", "since", "while", "both", "each", "one", "two",
    "three", "can", "could", "would", "should", "will", "may", "might", "must", "used", "use",
    "uses", "using", "made", "make",
])  # fmt: skip
PRONOUNS = frozenset([
    "he", "she", "it", "they", "him", "her", "its", "their", "them", "his", "hers", "theirs",
    "this", "these", "those", "who", "which", "هو", "هي", "هم", "هن", "ذلك", "تلك",
])  # fmt: skip
NEGATIONS = frozenset([
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "cannot", "n't",
    "isn't", "aren't", "wasn't", "weren't", "don't", "doesn't", "didn't", "won't", "can't",
    "couldn't", "shouldn't", "hasn't", "haven't", "hadn't", "لا", "ليس", "ليست", "لم", "لن", "غير",
    "بدون",
])  # fmt: skip


# ----------------------------------------------------------------------------- splitting


def _blank(text: str, span: tuple[int, int], fill: str = " ") -> str:
    start, end = span
    return text[:start] + fill * (end - start) + text[end:]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of the sentences of ``text``: a sentence ends at
    ``. ! ? ؟`` followed by a blank (not after an abbreviation, an initial or inside a
    number), at a blank line, before a list item and at a block tag (``<p>``, ``<br>``,
    ``<li>``); a single line break inside a sentence is a wrapped line, not an end.
    List markers and tags are left out of the spans; ``[n]`` markers after a sentence's
    end belong to it."""
    scan = text
    cuts: set[int] = set()
    for m in _TAG.finditer(text):
        if m.group(2).lower() in _BLOCK_TAGS:
            cuts.add(m.start())
        scan = _blank(scan, m.span())
    for m in _ITEM.finditer(scan):
        cuts.add(m.start())
        scan = _blank(scan, m.span())
    for m in re.finditer(r"\n[ \t]*\n", scan):
        cuts.add(m.start())
    for m in re.finditer(r"[.!?؟]+", scan):
        end = m.end()
        after = scan[end:]
        marker = re.match(r"(?:\s*\(?\[[\[\]\d,;\s-]*\]\)?)*", after)
        end += marker.end() if marker else 0
        if end < len(scan) and not scan[end].isspace():
            continue  # "2.25", "e.g.x", "U.S.A"
        if m.group() == "." and _no_end(scan, m.start(), end):
            continue
        cuts.add(end)
    spans = []
    start = 0
    for cut in sorted(cuts | {len(scan)}):
        piece = scan[start:cut]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((start + lead, start + len(piece.rstrip())))
        start = cut
    return spans


def _no_end(scan: str, dot: int, end: int) -> bool:
    """Whether the point at ``dot`` ends no sentence: after an abbreviation or an initial,
    or before a lower-case word."""
    word = re.search(r"([^\W\d_]+)\.?$", scan[max(0, dot - 12) : dot])
    if word and (
        word.group(1).casefold() in _ABBREVIATIONS or (len(word.group(1)) == 1 and word.group(1).isupper())
    ):
        return True
    following = re.match(r"\s+(\S)", scan[end:])
    return bool(following and following.group(1).islower())


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentence_spans`), without ``[n]`` markers, tags
    and list markers, on one line each."""
    return [clean_sentence(text[start:end]) for start, end in sentence_spans(text)]


def clean_sentence(sentence: str) -> str:
    """``sentence`` without citation markers, tags and list markers, on one line: the
    claim a verifier checks."""
    return " ".join(MARKER.sub("", strip_markup(sentence)).split())


def strip_markup(sentence: str) -> str:
    """``sentence`` without tags and list markers, on one line (its markers kept)."""
    return " ".join(_ITEM.sub("", _TAG.sub(" ", sentence)).split())


def tokens(text: str) -> list[str]:
    """The words and numbers of ``text``, NFKC-normalised and case-folded."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


_ARABIC_FOLD = str.maketrans("ةىأإآ", "تيااا")


@lru_cache(maxsize=1 << 16)  # every passage's words, stemmed for each answer checked against it
def stem(token: str) -> str:
    """A word's stem for matching: a number as written (without thousands commas), else
    its first five letters once an English inflection is cut ("married" and "marry",
    "played" and "play" match; Arabic: proclitics stripped and letter variants folded, so
    "عاصمة" and "عاصمتها" match)."""
    if NUMBER.fullmatch(token):
        return token.replace(",", "")
    if not token.isascii():
        token = strip_ar_prefix(token).translate(_ARABIC_FOLD)
    else:
        for suffix, ending in _SUFFIXES:
            if token.endswith(suffix) and len(token) - len(suffix) >= 3 and not token.endswith("ss"):
                token = token[: -len(suffix)] + ending
                break
    return token[:5]


#: English inflections cut before the five letters are taken (not from "ss": "bass", "glass")
_SUFFIXES = (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))


def content(tokens: Sequence[str]) -> list[str]:
    """The tokens that carry content: not stopwords (Arabic proclitics stripped first),
    not negations, not single letters ("s" of "France's")."""
    return [
        t
        for t in tokens
        if (len(t) > 1 or t.isdigit())
        and t not in STOPWORDS
        and strip_ar_prefix(t) not in STOPWORDS
        and t not in NEGATIONS
    ]


def number(token: str) -> str:
    """A number as compared: without its thousands commas."""
    return token.replace(",", "")


def names(sentence: str) -> set[str]:
    """The case-folded names of a sentence: capitalised Latin-script words that are not
    stopwords (the first word too: "Einstein won ..."), and numbers."""
    found = set()
    for m in re.finditer(r"[^\W_]+(?:[.,]\d+)*", unicodedata.normalize("NFKC", sentence)):
        word = m.group()
        if NUMBER.fullmatch(word):
            found.add(number(word))
        elif word[0].isupper() and word[0].isascii() and len(word) > 1:
            folded = word.casefold()
            if folded not in STOPWORDS and folded not in GENERIC and folded not in PRONOUNS:
                found.add(folded)
    return found


def negated(tokens: Sequence[str], near: set[str] | None = None) -> bool:
    """Whether ``tokens`` hold a negation (one followed within four words by a stem of
    ``near``, when given); "not only" and "not just" negate nothing."""
    return any(
        (token in NEGATIONS or token.endswith("n't"))
        and tokens[i + 1 : i + 2] not in (["only"], ["just"], ["merely"])
        and (near is None or any(stem(t) in near for t in tokens[i + 1 : i + 5]))
        for i, token in enumerate(tokens)
    )
