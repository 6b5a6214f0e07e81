"""Comparisons of two things, answered from their own passages without an LLM.

"Who was born first, Erika Jayne or Marco Da Silva?" is stated by no single passage: the
answer follows from two ("Erika Jayne (born 1971)", "Marco Da Silva (born 1977)"). A small
model picks one of the two names about as often right as wrong, and a support check that
reads one passage at a time certifies either. Here the two dates are read, one passage
each, and compared:

* :func:`comparison` reads the question's shape: two alternatives ("A or B", "A أم B"), a
  direction ("first", "older", "earlier" against "more recently", "younger", "later") and
  the event compared ("born", "formed", "released", ...);
* :func:`resolve` finds each alternative's passage (the one titled by it, else the one
  whose opening names it) and the year of the event in it (a year just after the event's
  word, "formed in 2005", "born 20 August 1938", else the passage's first year), and
  returns the earlier or later one, or None when a year is missing or both are equal;
* :func:`counted` does the same for a number: "Which genus has more species, A or B?"
  (:func:`quantity`: "more", "fewer" or "the most" of a noun, "taller" or "higher", "the
  larger population") is answered from the number each alternative's own passage states
  of it ("a genus of about 50 species", "a single species", "a duo", "a 650 ft
  skyscraper", "300,000 inhabitants"); it was right on 11 of the 12 HotpotQA questions
  where both gold passages state one;
* :func:`decided` is whichever of the two decides a question, :func:`chosen` tells which
  alternative an answer picks (the one it names first) and :func:`contradicted` whether
  it picks the other one or neither;
* :func:`both_hold` answers "Are A and B both X?" with yes when A's own passage and B's
  own passage each state X in their opening sentences ("Broughtonia is a genus of
  orchids", "Laeliocattleya ... orchid"); it never answers no (a passage that does not
  say X may say it in other words: "one lacks it" was right on 7 of 13 tuning questions,
  "both state it" on 10 of 11);
* :func:`same_origin` answers "Were A and B of the same nationality?" ("from the same
  country?") and "Are A and B both American?" with the country each one's own passage
  names first (a demonym or a name: "an American director", "a United States band").

The verifier caps an answer that picks the other alternative (or the other of yes and no)
and lifts one that agrees; a pick, or a yes/no about two things, that none of these
decides scores just under the support threshold whatever its words, which are the
question's (:func:`selfrag_core.verify.verify_answer`). Every strategy's answer check
replaces an answer the passages' dates or numbers contradict by the one they give
(:func:`derived_answer`), and RecursiveRAG searches each alternative's passage first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from selfrag_core.grounding import STOPWORDS
from selfrag_core.prompts import detect_language
from selfrag_core.signals.rules import Finding

_EARLIER = (
    r"first|earlier|earliest|older|oldest|sooner|longer ago|before the other"
    r"|أولا|أولاً|أقدم|أسبق|الأقدم|الأسبق"
)
_LATER = (
    r"more recently|most recently|more recent|later|latest|last|younger|youngest|newer|newest"
    r"|أحدث|الأحدث|أصغر|الأصغر"
)
_DIRECTION = re.compile(rf"(?<!\w)(?:(?P<earlier>{_EARLIER})|(?P<later>{_LATER}))(?!\w)", re.IGNORECASE)
#: the alternatives: "A or B" between a comma or colon (or the question's start) and a comma,
#: a question mark or the end
_ALTERNATIVES = re.compile(
    r"(?:^|[,:،]\s*)(?P<a>[^,:،?؟]{2,80}?)\s+(?:or|أم|أو)\s+(?P<b>[^,:،?؟]{2,80}?)\s*(?:[,?؟]|$)",
    re.IGNORECASE,
)
#: the events a date is read for, with the words a passage states them in
_EVENTS = {
    "born": r"born|b\.|ولد|ولدت",
    "formed": r"formed|founded|established|created|started|began|organized|تأسست|أسست",
    "released": r"released|published|premiered|aired|launched|debuted|issued|opened|first published|صدر|نشر",
}
_EVENT_OF_QUESTION = {
    "born": r"born|ولد|ولدت",
    "formed": r"formed|founded|established|created|started|began|تأسس|تأسست|أسس",
    "released": r"released|published|premiered|aired|launched|came out|came to market|debuted|opened|صدر|نشر",
}
#: a direction word followed by a noun ("the first Russian composer") describes, not compares
_DESCRIBES = re.compile(r"\s+(?!of\b|or\b|in\b|to\b|than\b|and\b)[a-z]{3,}", re.IGNORECASE)
_PERSON = re.compile(
    r"^(?:who|whom|which(?: \w+)? (?:person|man|woman|actor|actress|singer|musician|player|writer|author))\b"
    r"|^من\s",
    re.I,
)
_AGE = re.compile(r"(?<!\w)(?:older|oldest|younger|youngest|أكبر|أصغر)(?!\w)", re.IGNORECASE)
_YEAR = re.compile(r"(?<![\d.,])(1[0-9]{3}|20[0-9]{2})(?![\d.,]\d)")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_LEADING = re.compile(r"^(?:the|a|an|between)\s+", re.IGNORECASE)
#: a question's opening words: "A or B" found at the start holds the question before A
_ASKING = re.compile(r"(?:who|whom|whose|which|what|when|where|how|is|are|was|were|do|does|did)\s", re.I)
#: the capitalised name that ends such an "A" ("Who was born first Doug Liman" -> "Doug Liman")
_NAMED_TAIL = re.compile(
    r"(?<!\S)[A-Z][\w'’.-]*(?:\s+(?:(?:of|the|and|de|da|di|do|du|del|der|van|von|la|le|y|ul|al|el|bin|ibn)\s+)*[A-Z][\w'’.-]*)*$"
)


@dataclass(frozen=True)
class Comparison:
    """A question comparing two alternatives by the date of an event."""

    alternatives: tuple[str, str]
    earlier: bool  # the earlier date wins ("first", "older"); else the later ("more recently")
    event: str  # "born", "formed", "released" or "" (unnamed: the passages' first years)

    @property
    def searched(self) -> str:
        """What an alternative is searched with beside its name ("Erika Jayne born")."""
        return self.event


@dataclass(frozen=True)
class Resolution:
    """What the documents say: the alternative that wins, and each one's year and passage."""

    comparison: Comparison
    winner: int  # 0 or 1: the index in ``comparison.alternatives``
    years: tuple[int, int]
    passages: tuple[int, int]  # indices into the passages given to :func:`resolve`

    @property
    def alternatives(self) -> tuple[str, str]:
        return self.comparison.alternatives

    @property
    def winner_name(self) -> str:
        return self.comparison.alternatives[self.winner]


def _offer(question: str) -> tuple[tuple[str, str], str, str] | None:
    """The two alternatives ``question`` offers, the question without them (``rest``) and
    the question on one line, or None."""
    text = " ".join(question.split())
    found = _ALTERNATIVES.search(text)
    if found is None:
        return None
    start = found.start("a")
    asking = _ASKING.match(text) if start == 0 else None
    if asking is not None:  # "Who was born first Doug Liman or ...": A is the name ending it
        named = _NAMED_TAIL.search(text, asking.end(), found.end("a"))
        start = named.start() if named else start
    a, b = (
        _LEADING.sub("", text[i:j].strip(" \"'“”‘’")).strip()
        for i, j in ((start, found.end("a")), found.span("b"))
    )
    if not a or not b or a.casefold() == b.casefold():
        return None
    return (a, b), text[:start] + " " + text[found.end("b") :], text


def alternatives(question: str) -> tuple[str, str] | None:
    """The two alternatives ``question`` offers, by date or not ("Which magazine is
    published more often, Shonen Jump or Rolling Stone?" -> ``("Shonen Jump", "Rolling
    Stone")``), or None."""
    offer = _offer(question)
    return None if offer is None else offer[0]


def comparison(question: str) -> Comparison | None:
    """The comparison ``question`` asks, or None when it asks none ("Who was born first,
    Erika Jayne or Marco Da Silva?" -> ``("Erika Jayne", "Marco Da Silva")``, earlier, "born")."""
    offer = _offer(question)
    if offer is None:
        return None
    (a, b), rest, text = offer
    direction = next(
        (d for d in _DIRECTION.finditer(rest) if not _DESCRIBES.match(rest, d.end())), None
    )  # "the first Russian composer to ..." describes; "born first," compares
    if direction is None:
        return None
    event = next(
        (e for e, words in _EVENT_OF_QUESTION.items() if re.search(rf"(?<!\w)(?:{words})(?!\w)", rest, re.I)),
        "born" if _PERSON.match(text) and _AGE.search(rest) else "",
    )
    return Comparison((a, b), direction.group("earlier") is not None, event)


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _names(passage: str, alternative: str) -> float:
    """How far ``passage``'s opening (its title line, else its first 200 characters)
    names ``alternative``: the share of the alternative's words it holds."""
    words = _words(alternative)
    if not words:
        return 0.0
    opening = set(_words(_title(passage)))
    return sum(w in opening for w in words) / len(words)


def _year(passage: str, event: str) -> int | None:
    """The year of ``event`` in ``passage``: the first year within 60 characters after a
    word stating the event, else (for an unnamed event or none stated) the first year."""
    body = _body(passage)
    words = _EVENTS[event] if event else f"{_EVENTS['formed']}|{_EVENTS['released']}"
    for stated in re.finditer(rf"(?<!\w)(?:{words})(?!\w)", body, re.IGNORECASE):
        year = _YEAR.search(body, stated.end(), stated.end() + 60)
        if year is not None:
            return int(year.group(1))
    if event == "born":  # "Erika Jayne (1971 - )": the opening parenthesis's year
        paren = re.search(r"\(([^()]{0,80})\)", body[:400])
        year = _YEAR.search(paren.group(1)) if paren else None
        return int(year.group(1)) if year else None
    first = _YEAR.search(body)
    return int(first.group(1)) if first else None


def resolve(comparison: Comparison | None, passages: Sequence[str]) -> Resolution | None:
    """Which alternative the passages' dates favour, or None when an alternative has no
    passage of its own (at least all its words in the opening), a year is missing, or
    both years are equal."""
    homes = None if comparison is None else _homes(passages, comparison.alternatives)
    if comparison is None or homes is None:
        return None
    years = [_year(passages[i], comparison.event) for i in homes]
    if years[0] is None or years[1] is None or years[0] == years[1]:
        return None
    first = 0 if years[0] < years[1] else 1
    winner = first if comparison.earlier else 1 - first
    return Resolution(comparison, winner, (years[0], years[1]), (homes[0], homes[1]))


def _homes(passages: Sequence[str], alternatives: tuple[str, str]) -> tuple[int, int] | None:
    """Each alternative's own passage (:func:`_home`), or None when one has none or both
    have the same."""
    first, second = (_home(passages, alternative) for alternative in alternatives)
    return None if first is None or second is None or first == second else (first, second)


def _home(passages: Sequence[str], alternative: str) -> int | None:
    """The passage that names ``alternative`` in its opening (all its words), or None."""
    ranked = sorted(  # of those naming it alike, the one with the shortest title ("X" before "X Academy")
        range(len(passages)),
        key=lambda i: (-_names(passages[i], alternative), len(_words(_title(passages[i])))),
    )
    return ranked[0] if ranked and _names(passages[ranked[0]], alternative) >= 1.0 else None


def favoured(question: str, passages: Sequence[str]) -> int | None:
    """The alternative whose own passage holds more of what the question asks of it
    ("Which filmmaker was known for animation, Lev Yilmaz or Pamela B. Green?": the one
    whose passage says "animation"), or None: the question offers no alternatives, or
    compares by date (:func:`resolve` reads the dates), or words the passages cannot count
    ("more", "older"), or they hold the same number. An alternative named in no passage's
    opening loses to one that is."""
    offer = _offer(question)
    if offer is None or comparison(question) is not None:
        return None
    offered, rest, _ = offer
    if _COMPARATIVE.search(rest):
        return None
    asked = _stems(_words(rest))
    held: list[float] = []
    for alternative in offered:
        home = _home(passages, alternative)
        held.append(-1.0 if home is None else float(len(asked & {w[:5] for w in _words(passages[home])})))
    if held[0] == held[1]:
        return None
    return 0 if held[0] > held[1] else 1


#: number words up to twenty and the tens, and the words that say one
_NUMBER_WORDS = {
    **{w: n for n, w in enumerate(_WORD.findall(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty"
    ))},
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
    "dozen": 12, "single": 1, "sole": 1, "only": 1, "lone": 1,
}  # fmt: skip
_SCALES = {"hundred": 100.0, "thousand": 1e3, "million": 1e6, "billion": 1e9}
#: a number: digits ("1,767", "7295", the first of "75–100") or a number word, then a scale
_NUMBER = (
    r"(?P<n>\d[\d,]*(?:\.\d+)?|" + "|".join(_NUMBER_WORDS) + r")(?:[–-]\d[\d,]*)?"
    r"(?:\s+(?P<scale>hundred|thousand|million|billion)(?!\w))?"
)
#: the words between a number and what it counts ("about 50 described species"): not a
#: number, not "of" or "the" ("one of the species" counts nothing)
_BETWEEN = r"(?:(?!\d|of\s|the\s)[\w'’-]+\s+){0,3}?"
#: a band's size in one word ("a four-piece band", "a duo")
_ENSEMBLE = re.compile(
    r"(?<!\w)(?:(?P<n>\w+)-(?:piece|person|member)|duo|trio|quartet|quintet|sextet)(?!\w)", re.IGNORECASE
)
_ENSEMBLES = {"duo": 2, "trio": 3, "quartet": 4, "quintet": 5, "sextet": 6}
#: "more species", "the most studio albums", "fewer members": the comparative and what it
#: counts (at most five words, the last the counted noun, a plural), up to a comma or the end
_COUNTS = re.compile(
    r"(?<!\w)(?P<dir>more|most|fewer|less|least)\s+(?P<what>(?:[\w'’-]+\s+){0,4}?[\w'’-]+)\s*(?:[,:?]|$)",
    re.IGNORECASE,
)
#: "Which tower is taller, A or B?": a height compared (not "a higher ... ratio")
_HEIGHT = re.compile(r"(?<!\w)(?P<dir>taller|tallest|higher|highest|shorter|lower)\s*(?:[,:?]|$)", re.I)
_LENGTH = re.compile(r"(?P<n>\d[\d,]*(?:\.\d+)?)\s*(?P<unit>ft|feet|foot|m|metres|meters)(?!\w)", re.I)
_POPULATION = re.compile(
    r"(?<!\w)(?:(?P<dir>larger|largest|smaller|bigger)\s+population|more populous)", re.I
)
_PLAIN_NUMBER = _NUMBER.replace("?P<n>", "?:").replace("?P<scale>", "?:")
_PEOPLE = re.compile(
    rf"population\W+(?:\w+\W+){{0,6}}?{_PLAIN_NUMBER}|{_PLAIN_NUMBER}\s+(?:inhabitants|residents|people)(?!\w)",
    re.IGNORECASE,
)
_FEWER = frozenset(["fewer", "less", "least", "shorter", "lower", "smaller"])


@dataclass(frozen=True)
class Quantity:
    """What a question compares two alternatives by, a number: the one with the higher
    number wins (else the lower); ``counted`` is a noun ("species"), "height" or "population"."""

    alternatives: tuple[str, str]
    higher: bool
    counted: str
    #: how the question names what is counted ("studio albums"; "" for a height or population)
    words: str = ""

    @property
    def searched(self) -> str:
        """What an alternative is searched with beside its name ("Salvia species")."""
        return self.words or self.counted


def quantity(question: str) -> Quantity | None:
    """The quantity ``question`` compares two alternatives by, or None: "Which genus has
    more species, A or B?" (``"specie"``, higher), "Which tower is taller, A or B?"
    (``"height"``), "Which has the larger population, A or B?" (``"population"``)."""
    offer = _offer(question)
    if offer is None:
        return None
    offered, rest, _ = offer
    for kind, pattern in (("population", _POPULATION), ("height", _HEIGHT), ("", _COUNTS)):
        found = pattern.search(rest)
        if found is not None:
            word = (found.group("dir") or "more").casefold()
            if kind:
                return Quantity(offered, word not in _FEWER, kind)
            what = found.group("what")
            noun = _words(what)[-1]
            if _singular(noun) == noun:  # "more often", "a more acclaimed guitarist": no count
                return None
            return Quantity(offered, word not in _FEWER, _singular(noun), what)
    return None


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _value(found: re.Match[str]) -> float:
    """The number a :data:`_NUMBER` match holds, scaled ("24 million")."""
    raw, scale = found.group("n").casefold(), found.group("scale")
    value = float(_NUMBER_WORDS[raw]) if raw in _NUMBER_WORDS else float(raw.replace(",", ""))
    return value * _SCALES[scale.casefold()] if scale else value


def _amount(passage: str, counted: str) -> tuple[float, str] | None:
    """The number ``passage``'s text states of ``counted``, and how it states it: the first
    number (digits or words, "a single") at most three words before the noun ("a genus of
    about 50 species", "a three time Pulitzer Prize winner"), for members else a band's
    size in one word ("a four-piece", "a duo"); the first height in feet or metres (in
    metres, "650 ft"); the population ("24 million"). None when it states none."""
    body = _body(passage)
    if counted == "height":
        length = _LENGTH.search(body)
        if length is None:
            return None
        value = float(length.group("n").replace(",", ""))
        feet = length.group("unit").casefold() in ("ft", "feet", "foot")
        return (value * 0.3048 if feet else value), length.group(0)
    if counted == "population":
        people = _PEOPLE.search(body)
        number = None if people is None else re.search(_NUMBER, people.group(0), re.IGNORECASE)
        return None if number is None else (_value(number), number.group(0))
    noun = rf"\s+{_BETWEEN}{re.escape(counted)}(?:s|es)?(?![\w'’-])"
    found = re.search(rf"(?<![\w.,]){_NUMBER}(?={noun})", body, re.IGNORECASE)
    if found is not None:
        value = _value(found)
        return value, (found.group(0) if found.group(0)[0].isdigit() else f"{value:,.0f}")
    size = _ENSEMBLE.search(body) if counted == "member" else None
    if size is None:
        return None
    word = size.group(0).casefold()
    members = _ENSEMBLES.get(word) or _NUMBER_WORDS.get((size.group("n") or "").casefold(), 0)
    return (float(members), str(members)) if members else None


@dataclass(frozen=True)
class Counted:
    """What the passages' numbers say: the alternative that wins, each one's number (a
    height in metres) as compared and as its passage states it, and each one's passage."""

    quantity: Quantity
    winner: int  # 0 or 1: the index in ``quantity.alternatives``
    amounts: tuple[float, float]
    stated: tuple[str, str]  # "650 ft", "1000", "24 million"
    passages: tuple[int, int]  # indices into the passages given to :func:`counted`

    @property
    def alternatives(self) -> tuple[str, str]:
        return self.quantity.alternatives


def counted(question: str, passages: Sequence[str]) -> Counted | None:
    """Which alternative the passages' numbers favour in a question comparing a quantity
    (:func:`quantity`), or None: the question compares no quantity, an alternative has no
    passage of its own, a passage states no number of it, or both state the same."""
    asked = quantity(question)
    if asked is None:
        return None
    homes = _homes(passages, asked.alternatives)
    if homes is None:
        return None
    first, second = (_amount(passages[i], asked.counted) for i in homes)
    if first is None or second is None or first[0] == second[0]:
        return None
    more = 0 if first[0] > second[0] else 1
    winner = more if asked.higher else 1 - more
    return Counted(asked, winner, (first[0], second[0]), (first[1], second[1]), homes)


_COMPARATIVE = re.compile(
    r"(?<!\w)(?:more|less|most|least|fewer|longer|shorter|larger|smaller|bigger|higher|lower|busier|"
    r"older|younger|earlier|later|first|last|greater|better|worse|taller|closer|farther|further)(?!\w)",
    re.IGNORECASE,
)


def chosen(comparison: Comparison, answer: str) -> int | None:
    """The alternative ``answer`` picks: the one it names first (all its words, else its
    last word, "Chrétien"), None when it names neither."""
    lowered = " ".join(_words(answer))
    at: list[int] = []
    for alternative in comparison.alternatives:
        words = _words(alternative)
        whole = f" {lowered} ".find(f" {' '.join(words)} ") if words else -1
        if whole < 0 and words:
            whole = f" {lowered} ".find(f" {words[-1]} ")
        at.append(whole)
    if at[0] < 0 and at[1] < 0:
        return None
    if at[0] < 0 or at[1] < 0:
        return 0 if at[0] >= 0 else 1
    return 0 if at[0] < at[1] else 1


def decided(question: str, passages: Sequence[str]) -> Resolution | Counted | None:
    """What ``passages`` decide of a question comparing two alternatives: by their dates
    (:func:`resolve`), else by a number (:func:`counted`); None when they decide nothing."""
    return resolve(comparison(question), passages) or counted(question, passages)


def contradicted(decision: Resolution | Counted, answer: str) -> bool:
    """Whether ``answer`` picks the other alternative than ``decision``'s, or neither."""
    return chosen(Comparison(decision.alternatives, True, ""), answer) != decision.winner


#: a derived answer, in the question's language
_DERIVED = {
    "en": "{winner}: {said} [{home}], against {other_said} for {other} [{other_home}].",
    "ar": "{winner}: {said} [{home}]، مقابل {other_said} لـ{other} [{other_home}].",
}


def derived_answer(resolution: Resolution | Counted, language: str = "en") -> str:
    """The answer the dates (or numbers) give, citing both passages (1-based markers):
    "Erika Jayne: 1971 [1], against 1977 for Marco Da Silva [2].", "Salvia: 1000 species
    [1], against 70 for Arachis [2]." (each number as its passage states it); in Arabic
    for ``language`` "ar"."""
    win, lose = resolution.winner, 1 - resolution.winner
    homes = resolution.passages
    if isinstance(resolution, Resolution):
        names, said = resolution.comparison.alternatives, [str(y) for y in resolution.years]
    else:
        names, said = resolution.quantity.alternatives, list(resolution.stated)
        said[win] += f" {resolution.quantity.words}" if resolution.quantity.words else ""
    return _DERIVED.get(language, _DERIVED["en"]).format(
        winner=names[win], said=said[win], home=homes[win] + 1,
        other=names[lose], other_said=said[lose], other_home=homes[lose] + 1,
    )  # fmt: skip


#: the question words that frame "Are A and B both X?" rather than say what X is
_FRAMING = frozenset([
    "both", "located", "considered", "described", "based", "used", "known", "type", "types",
    "kind", "kinds", "each", "كلا", "كلاهما", "كل",
])  # fmt: skip
#: a question asking whether two things share or differ in something: not :func:`both_hold`'s
_SAME = re.compile(r"(?<!\w)(?:same|different|differ|share|نفس|مختلف|مختلفة)(?!\w)", re.IGNORECASE)
_POLAR = re.compile(r"^\s*(?:are|is|were|was|do|does|did|can|could|هل)(?!\w)", re.IGNORECASE)


#: countries, by the words a passage or a question names them with (a demonym or a name)
_COUNTRY_LINES = """\
us:american|americans|united states|u.s.|usa|america|أمريكي|أمريكية|أميركي|أميركية|الولايات المتحدة
gb:british|english|scottish|welsh|united kingdom|england|scotland|wales|britain|بريطاني|بريطانية
gb:إنجليزي|إنجليزية
ie:irish|ireland|أيرلندي|أيرلندية
ca:canadian|canada|كندي|كندية
au:australian|australia|أسترالي|أسترالية
nz:new zealand|new zealander
fr:french|france|فرنسي|فرنسية
de:german|germany|ألماني|ألمانية
it:italian|italy|إيطالي|إيطالية
es:spanish|spain|إسباني|إسبانية
pt:portuguese|portugal
nl:dutch|netherlands|holland|هولندي|هولندية
be:belgian|belgium
ch:swiss|switzerland
at:austrian|austria|نمساوي|نمساوية
se:swedish|sweden|سويدي|سويدية
no:norwegian|norway
dk:danish|denmark
fi:finnish|finland
is:icelandic|iceland
pl:polish|poland|بولندي|بولندية
cz:czech|czechoslovak
hu:hungarian|hungary
ro:romanian|romania
bg:bulgarian|bulgaria
gr:greek|greece|يوناني|يونانية
tr:turkish|turkey|تركي|تركية
ru:russian|russia|soviet|روسي|روسية
ua:ukrainian|ukraine
rs:serbian|serbia|yugoslav
hr:croatian|croatia
al:albanian|albania
il:israeli|israel
ir:iranian|iran|persian
eg:egyptian|egypt|مصري|مصرية
sa:saudi|سعودي|سعودية
lb:lebanese|lebanon|لبناني|لبنانية
in:indian|india|هندي|هندية
pk:pakistani|pakistan
bd:bangladeshi|bangladesh
cn:chinese|china|صيني|صينية
jp:japanese|japan|ياباني|يابانية
kr:korean|korea|south korean|south korea
tw:taiwanese|taiwan
vn:vietnamese|vietnam
th:thai|thailand
ph:filipino|philippine|philippines
id:indonesian|indonesia
my:malaysian|malaysia
mx:mexican|mexico|مكسيكي|مكسيكية
br:brazilian|brazil|برازيلي|برازيلية
ar:argentine|argentinian|argentina
cl:chilean|chile
co:colombian|colombia
cu:cuban|cuba
jm:jamaican|jamaica
ng:nigerian|nigeria
za:south african|south africa
ke:kenyan|kenya"""
_COUNTRY_OF = {
    word: country
    for country, words in (line.split(":") for line in _COUNTRY_LINES.splitlines())
    for word in words.split("|")
}
_COUNTRY = re.compile(
    r"(?<![\w-])(?:" + "|".join(sorted(map(re.escape, _COUNTRY_OF), key=len, reverse=True)) + r")(?![\w-])",
    re.IGNORECASE,
)
_BOTH = re.compile(r"(?<!\w)(?:both|كلا|كلاهما)(?!\w)", re.IGNORECASE)
_ORIGIN = re.compile(r"nationalit|countr|جنسي|بلد|دولة", re.IGNORECASE)


def _country(text: str) -> str | None:
    """The country ``text`` names first ("an American director" -> ``"us"``), or None."""
    found = _COUNTRY.search(re.sub(r"\([^()]*\)", " ", text))
    return None if found is None else _COUNTRY_OF[found.group(0).casefold()]


def same_origin(question: str, passages: Sequence[str]) -> bool | None:
    """The yes (True) or no (False) that the two things' own passages give to "Were A and
    B of the same nationality?" ("from the same country?") or "Are A and B both
    American?" ("both from the United States?"): the country each one's passage names
    first in its first two sentences (a demonym or a name; a "born in" aside in
    parentheses is skipped), against each other or against the question's. None when the
    question asks neither, or a passage names no country."""
    if not _POLAR.match(question):
        return None
    homes = _named_homes(question, passages)
    if homes is None:
        return None
    named = " ".join(_title(passages[i]) for i in homes)
    if _SAME.search(question) and _ORIGIN.search(question):
        asked = None
    else:  # "both American": one country, named after "both", and not in a title
        both = _BOTH.search(question)
        found = [m for m in _COUNTRY.finditer(question) if m.group(0).casefold() not in named.casefold()]
        if both is None or len(found) != 1 or found[0].start() < both.end():
            return None
        asked = _COUNTRY_OF[found[0].group(0).casefold()]
    origins = [_country(_lead(passages[i])) for i in homes]
    if origins[0] is None or origins[1] is None:
        return None
    return origins[0] == origins[1] if asked is None else origins[0] == origins[1] == asked


def _named_homes(question: str, passages: Sequence[str]) -> list[int] | None:
    """The passages whose title line ``question`` names in full (its parenthesis aside),
    when there are exactly two with different titles, else None."""
    asked = set(_words(question))
    homes: list[int] = []
    for i, passage in enumerate(passages):
        title = _title(passage)
        words = [w for w in _words(re.sub(r"\(.*?\)", "", title)) if w not in STOPWORDS]
        if words and all(w in asked for w in words) and all(_title(passages[j]) != title for j in homes):
            homes.append(i)
    return homes if len(homes) == 2 else None


def both_hold(question: str, passages: Sequence[str]) -> bool | None:
    """True when ``question`` asks whether two things are both something ("Are
    Broughtonia and Laeliocattleya both orchids?") and each thing's own passage (the one
    whose title line the question names in full; exactly two of them) states it in its
    title or first two sentences; else None (never False: see the module docstring)."""
    if not _POLAR.match(question) or _SAME.search(question):
        return None
    homes = _named_homes(question, passages)
    if homes is None:
        return None
    named = {w for i in homes for w in _words(_title(passages[i]))}
    wanted = _stems(w for w in _words(question)[1:] if w not in named and w not in _FRAMING)
    if not wanted:
        return None
    return True if all(wanted <= _stems(_words(_opening(passages[i]))) for i in homes) else None


def _title(passage: str) -> str:
    """A passage's opening: its title line, else its first 200 characters."""
    return passage.split("\n", 1)[0] if "\n" in passage[:200] else passage[:200]


def _body(passage: str) -> str:
    """A passage's text after its title line (all of it when it has none)."""
    return passage.split("\n", 1)[1] if "\n" in passage[:200] else passage


def _opening(passage: str) -> str:
    """A passage's title and the first two sentences of its text."""
    return f"{_title(passage)} {_lead(passage)}"


def _lead(passage: str) -> str:
    """The first two sentences of a passage's text."""
    return " ".join(re.split(r"(?<=[.!?؟])\s+", _body(passage).strip())[:2])


def _stems(words: Iterable[str]) -> set[str]:
    return {w[:5] for w in words if w not in STOPWORDS and len(w) > 2}


class ComparisonRule:
    """The answer rule of a question picking one of two alternatives that the documents'
    dates or numbers decide (:func:`decided`): an answer that picks the other one or
    neither is flagged, and with ``replace`` (the default) replaced by the answer they give
    ("Erika Jayne: 1971 [1], against 1977 for Marco Da Silva [2]."). Written and tuned on
    HotpotQA's comparison questions, so it is opt-in: ``PlainRAGConfig(rules=(ComparisonRule(),))``
    (:mod:`~selfrag_core.signals.rules`)."""

    name = "comparison"

    def __init__(self, *, replace: bool = True) -> None:
        self.replace = replace

    def check(self, question: str, answer: str, passages: Sequence[str]) -> Finding | None:
        decision = decided(question, passages)
        if decision is None or not contradicted(decision, answer):
            return None
        detail: dict[str, list[float]]
        if isinstance(decision, Resolution):
            evidence, detail = "dates", {"years": [float(y) for y in decision.years]}
        else:
            evidence, detail = "numbers", {"amounts": list(decision.amounts)}
        derived = derived_answer(decision, detect_language(question)) if self.replace else None
        return Finding(self.name, f"the documents' {evidence} give another answer", derived, detail)
