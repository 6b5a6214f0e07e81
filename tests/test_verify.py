"""The claim-level verifier: the failures quoted in issue #35, and true answers that stay certified."""

from __future__ import annotations

from typing import ClassVar

import pytest

from selfrag_core.grounding import assess, clean_answer, degenerate_reason, repetition
from selfrag_core.verify import (
    DEFAULT,
    CrossEncoderVerifier,
    LexicalVerifier,
    Verdict,
    Verifier,
    best,
    sentence_spans,
    split_sentences,
    verify_answer,
)

GIT = "Git 2.25 added the sparse-checkout command, which restricts the working tree to a subset of paths."
NOBEL = "Marie Curie won the Nobel Prize in Physics in 1903. Albert Einstein won it in 1921."
RIGHTS = "The First Amendment protects freedom of speech, freedom of religion and the freedom of the press."
CONQUEST = "Spanish conquistadors arrived in the region in the 16th century."
PLAINS = "The Llaneros are the cowboys of the plains of Venezuela."
VACCINES = "Vaccines do not cause autism, according to many large studies."
SWITCH = "Git 2.23 introduced the experimental git switch and git restore commands."


def verdict(answer: str, *passages: str) -> tuple[bool, float | None, list[str | None]]:
    v = verify_answer(answer, list(passages))
    return v.supported, v.score, [x.reason for _, x in v.sentences]


# ----------------------------------------------------------------------------- flagged


def test_a_repetition_loop_is_never_supported() -> None:
    loop = "The commands were introduced by the Git-based version of the " + "Git-based " * 12
    supported, score, reasons = verdict(loop, SWITCH, "The git-based version of the tooling.")
    assert (supported, score, reasons) == (False, 0.0, ["repetition"])
    grounding = assess(loop, "Which release introduced git switch?", SWITCH, passages=[SWITCH])
    assert grounding.degenerate == "repetition" and not grounding.supported


def test_an_answer_loop_is_never_supported() -> None:
    supported, score, reasons = verdict(
        "1986\nAnswer: 2003\nAnswer: 2004\nAnswer: 2005", "In 1986 and 2003 and 2004."
    )
    assert (supported, score, reasons) == (False, 0.0, ["answer_loop"])


def test_an_invented_year_is_flagged_although_the_right_source_was_retrieved() -> None:
    supported, score, reasons = verdict("The git sparse-checkout command was added in 2019.", GIT, SWITCH)
    assert not supported and score is not None and score < 0.5
    assert reasons == ["number_not_in_source:2019"]
    assert verdict("The git sparse-checkout command was added in Git 2.25.", GIT, SWITCH)[0]


def test_a_list_item_the_passage_does_not_hold_is_flagged() -> None:
    answer = "The First Amendment protects freedom of speech, the right to bear arms, and the right to vote."
    assert not verdict(answer, RIGHTS)[0]
    true_list = (
        "The First Amendment protects freedom of speech, freedom of religion and freedom of the press."
    )
    assert verdict(true_list, RIGHTS)[0]


def test_words_of_two_documents_do_not_make_a_supported_sentence() -> None:
    answer = "The conquistadors, known as the Llaneros, arrived in the 16th century."
    supported, _, reasons = verdict(answer, CONQUEST, PLAINS)
    assert not supported and reasons == ["name_not_in_source:llaneros"]
    # against the union of the two the old signal certified it
    joined = f"{CONQUEST}\n\n{PLAINS}"
    assert assess(answer, "Who arrived in the 16th century?", joined).token_support >= 0.5


def test_a_number_read_from_another_persons_sentence_is_misattributed() -> None:
    supported, _, reasons = verdict("Albert Einstein won the Nobel Prize in 1903.", NOBEL)
    assert not supported and reasons == ["misattributed:1903"]
    assert verdict("Marie Curie won the Nobel Prize in 1903.", NOBEL)[0]
    assert verdict("Albert Einstein won the Nobel Prize in 1921.", NOBEL)[0]


def test_a_name_swap_across_documents_is_flagged() -> None:
    supported, _, reasons = verdict("Bob Smith founded Acme in 1990.", "Alice Jones founded Acme in 1990.")
    assert not supported and reasons == ["name_not_in_source:bob"]


def test_a_negation_flip_is_flagged_both_ways() -> None:
    assert verdict("Vaccines cause autism.", VACCINES)[2] == ["negation"]
    assert verdict("Vaccines do not cause autism.", VACCINES)[0]
    positive = "The bridge opened to traffic in 1937."
    assert verdict("The bridge did not open to traffic in 1937.", positive)[2] == ["negation"]


def test_a_wrong_number_in_arabic_is_flagged() -> None:
    supported, _, reasons = verdict("تأسست الشركة عام 2019.", "تأسست الشركة عام 2005 في القاهرة.")
    assert not supported and reasons == ["number_not_in_source:2019"]


# ----------------------------------------------------------------------------- certified


@pytest.mark.parametrize(
    ("answer", "passage"),
    [
        pytest.param(GIT, GIT, id="exact copy"),
        pytest.param("France's capital is Paris.", "Paris is the capital of France.", id="reordering"),
        pytest.param(
            "1. Paris is in France.\n2. Berlin is in Germany.",
            "Paris is in France. Berlin is in Germany.",
            id="list",
        ),
        pytest.param("<p>Git 2.25 added the\nsparse-checkout command.</p>", GIT, id="markup, wrapped lines"),
        pytest.param(
            "Curie won the Nobel Prize in 1903.",
            "Marie Curie was a physicist. She won the Nobel Prize in 1903.",
            id="pronoun",
        ),
        pytest.param("The club has 1,000 members.", "The club has 1000 members.", id="thousands"),
        pytest.param(
            "No, crime is not associated with syringe sales.",
            "Syringe sales were not associated with crime.",
            id="yes/no",
        ),
        pytest.param(
            "تقع باريس في فرنسا وهي عاصمتها.", "باريس هي عاصمة فرنسا وتقع على نهر السين.", id="arabic"
        ),
    ],
)
def test_a_true_answer_stays_certified(answer: str, passage: str) -> None:
    supported, score, reasons = verdict(answer, "An unrelated passage about volcanoes.", passage)
    assert supported and score is not None and score >= 0.5, reasons


def test_one_invented_sentence_pulls_a_long_answer_below_the_threshold() -> None:
    answer = f"{GIT} It restricts the working tree to a subset of paths. It was added in 2019."
    v = verify_answer(answer, [GIT])
    assert [x.supported for _, x in v.sentences] == [True, True, False]
    assert not v.supported and v.supported_share == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- splitting


def test_list_markers_are_not_sentences() -> None:
    assert split_sentences("1. Paris is big.\n2. Berlin is cold.\n- Rome is old") == [
        "Paris is big.", "Berlin is cold.", "Rome is old",
    ]  # fmt: skip


def test_markup_and_wrapped_lines_make_whole_sentences() -> None:
    text = "<p>Honeybees dance to\nshow the hive where\nthe flowers are.</p><p>They use the sun.</p>"
    assert split_sentences(text) == [
        "Honeybees dance to show the hive where the flowers are.",
        "They use the sun.",
    ]


def test_abbreviations_decimals_and_markers_do_not_end_sentences() -> None:
    text = "Dr. Smith paid $2.50 in the U.S. today [1]. It was e.g. fine. Next? Yes [2]"
    assert split_sentences(text) == [
        "Dr. Smith paid $2.50 in the U.S. today.",
        "It was e.g. fine.",
        "Next?",
        "Yes",
    ]
    spans = sentence_spans(text)
    assert text[spans[0][0] : spans[0][1]].endswith("[1].")


# ----------------------------------------------------------------------------- the pluggable verifier


class _NLI:
    """A cross-encoder's shape: predict(pairs) -> a row of logits per pair, labels in config."""

    class config:
        id2label: ClassVar[dict[int, str]] = {0: "contradiction", 1: "entailment", 2: "neutral"}

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def predict(self, pairs: list[tuple[str, str]]) -> list[list[float]]:
        self.pairs.extend(pairs)
        return [
            [0.0, 4.0, 0.0] if claim.rstrip(".") in passage else [3.0, 0.0, 0.0] for passage, claim in pairs
        ]


def test_a_cross_encoder_verifier_scores_entailment_per_passage() -> None:
    model = _NLI()
    verifier = CrossEncoderVerifier(model)
    assert isinstance(verifier, Verifier) and verifier.entailment == 1
    v = verify_answer(
        "Paris is in France. Rome is in Spain.", ["Paris is in France", "Rome is in Italy"], verifier
    )
    assert [(x.supported, x.passage) for _, x in v.sentences] == [(True, 0), (False, 0)]
    assert len(model.pairs) == 4  # every sentence against every passage, one call
    loop = verify_answer("Paris Paris Paris Paris", ["Paris Paris Paris Paris"], verifier)
    assert loop.sentences[0][1].reason == "repetition" and not loop.supported


def test_a_cross_encoder_without_labels_needs_the_column() -> None:
    class Bare:
        def predict(self, pairs: list[tuple[str, str]]) -> list[list[float]]:
            return [[0.0, 1.0] for _ in pairs]

    with pytest.raises(ValueError, match="entailment="):
        CrossEncoderVerifier(Bare())
    assert CrossEncoderVerifier(Bare(), entailment=1).verify(["a b"], ["a b"])[0][0].score > 0.5
    with pytest.raises(TypeError, match="predict"):
        CrossEncoderVerifier(object())


def test_a_user_verifier_decides_support_in_assess() -> None:
    class Strict:
        threshold = 0.5

        def verify(
            self, sentences: list[str], passages: list[str], question: str = ""
        ) -> list[list[Verdict]]:
            return [[Verdict(0.0, False, j, "strict") for j in range(len(passages))] for _ in sentences]

    grounding = assess("Git 2.25 added sparse-checkout.", "When?", GIT, passages=[GIT], verifier=Strict())
    assert not grounding.supported and grounding.support_score == 0.0


def test_an_embedder_lifts_a_paraphrase_but_not_an_invented_year() -> None:
    class Embedder:  # every text the same direction: the most generous embedder there is
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    verifier = LexicalVerifier(embedder=Embedder())
    passage = "The hive is shown where flowers grow by the dancing of honeybees."
    assert not verify_answer("Honeybees perform a waggle routine.", [passage]).supported
    assert verify_answer("Honeybees perform a waggle routine.", [passage], verifier).supported
    assert not verify_answer("Honeybees dance since 1950.", [passage], verifier).supported


# ----------------------------------------------------------------------------- cleaning, the echo filter


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("1986\nAnswer: 2003\nAnswer: 2004\nAnswer: 2005", "1986"),
        ("Answer: Paris\nAnswer: Paris\nAnswer: Paris", "Paris"),
        ("Improved answer: Paris is the capital.", "Paris is the capital."),
        ("Paris\nQuestion: what is the capital of Germany?", "Paris"),
        (
            "It was built by the Git-based version of the " + "Git-based " * 8,
            "It was built by the Git-based version of the Git-based",
        ),
    ],
)
def test_loops_and_preambles_are_cut_from_answers(reply: str, answer: str) -> None:
    assert clean_answer(reply) == answer
    assert repetition(clean_answer(reply)) is None


def test_a_true_answer_is_not_cut() -> None:
    for text in (
        "freedom of speech, freedom of religion, freedom of the press",
        "The key question: whether it works.",
    ):
        assert clean_answer(text) == text


@pytest.mark.parametrize(
    "answer",
    [
        "No, crime is not associated with over-the-counter pharmacy syringe sales.",
        "Yes, crime is associated with over-the-counter pharmacy syringe sales.",
        "Crime is associated with over-the-counter pharmacy syringe sales.",
    ],
)
def test_a_yes_no_answer_to_a_yes_no_question_is_no_echo(answer: str) -> None:
    question = "Is crime associated with over-the-counter pharmacy syringe sales?"
    assert degenerate_reason(answer, question, "context") is None
    assert degenerate_reason(question, question, "context") == "question_echo"


@pytest.mark.parametrize(
    ("question", "answer"),
    [  # answers of the default local model to HotpotQA comparisons, once rejected as echoes
        ("Who is older, Ferdi Taygan or Mahesh Bhupathi?", "Ferdi Taygan is older than Mahesh Bhupathi."),
        (
            "Which band has more members, Test Icicles or X Ambassadors?",
            "X Ambassadors has more members than Test Icicles.",
        ),
        ("أيهما أقدم، مدينة القاهرة أم مدينة الإسكندرية؟", "مدينة الإسكندرية أقدم من مدينة القاهرة"),
    ],
)
def test_an_answer_that_picks_an_alternative_is_no_echo(question: str, answer: str) -> None:
    assert degenerate_reason(answer, question, "context") is None
    assert degenerate_reason(question, question, "context") == "question_echo"
    restated = question.rstrip("?؟").replace("Who is older, ", "Who is older: ")
    assert degenerate_reason(restated, question, "context") == "question_echo"


def test_selfirag_decides_support_and_cites_with_the_configured_verifier() -> None:
    from selfrag_core import GroundingConfig, SelfIRAG, SelfRAGConfig
    from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json

    model = _NLI()
    config = SelfRAGConfig(
        grounding=GroundingConfig(verifier=CrossEncoderVerifier(model)), max_refinement_iterations=1
    )
    llm = FakeLLM(judge_json("Git 2.25 added the sparse-checkout command", 9))
    result = SelfIRAG(FakeRetriever([GIT]), llm, config).query("Which release added sparse-checkout?")
    assert model.pairs and all(passage == GIT for passage, _ in model.pairs)
    assert result.history[0].evaluation.grounding.supported and result.citations[0].supported_by == [1]
    with pytest.raises(TypeError, match="verifier must have verify"):
        GroundingConfig(verifier=object())


# ----------------------------------------------------------------------------- answers to the question


def asked(question: str, answer: str, *passages: str) -> tuple[float | None, list[str | None]]:
    v = verify_answer(answer, list(passages), question=question)
    return v.score, [x.reason for _, x in v.sentences]


TYSONS = "Tysons Galleria is a shopping mall in Fairfax County, Virginia, near Washington, D.C."


def test_a_name_of_several_words_made_of_words_of_others_is_flagged() -> None:
    question = "Tysons Galleria is located in what county?"
    invented = "Tysons Galleria is located in the Washington County of Virginia."
    score, reasons = asked(question, invented, TYSONS)
    assert score is not None and score < 0.5
    assert reasons == ["name_not_in_source:washington county of virginia"]
    score, _ = asked(question, "Tysons Galleria is located in Fairfax County, Virginia.", TYSONS)
    assert score is not None and score >= 0.5


def test_an_answer_of_the_wrong_kind_is_no_answer() -> None:
    council = "In 1999 the European Council tasked a body with drafting a European Charter of Human Rights."
    when = "When did the European Council task a body with drafting a charter?"
    dateless = "The European Council tasked a body with drafting a European Charter."
    score, reasons = asked(when, dateless, council)
    assert score is not None and score <= 0.2 and reasons == ["not_a_date"]
    assert (asked(when, "The European Council did so in 1999.", council)[0] or 0) >= 0.5
    many = "How many digits does the largest known prime have?"
    prime = "The largest known prime has 22,338,618 digits."
    assert asked(many, "The largest known prime has many digits.", prime)[1] == ["not_a_number"]
    assert (asked(many, "It has 22,338,618 digits.", prime)[0] or 0) >= 0.5


def test_an_answer_that_only_restates_the_question_is_no_answer() -> None:
    kyoto = "The Kyoto Protocol tried to address climate change by cutting emissions."
    question = "What did the Kyoto Protocol try to address?"
    assert asked(question, "The Kyoto Protocol did try to address it.", kyoto)[1] == ["restates_the_question"]
    assert (asked(question, "The Kyoto Protocol tried to address climate change.", kyoto)[0] or 0) >= 0.5


MAGAZINES = [
    "Rolling Stone\nRolling Stone is an American biweekly magazine.",
    "Shonen Jump\nWeekly Shonen Jump is a manga anthology.",
]


def test_a_pick_of_an_alternative_restates_the_question_and_naming_neither_is_no_answer() -> None:
    question = "Which magazine is published more often, Shonen Jump or Rolling Stone?"
    answer = "Rolling Stone is published more often than Shonen Jump."
    # its words are the question's: not rejected as a restatement, and the word checks hold it
    assert [best(row).score for row in DEFAULT.verify([answer], MAGAZINES, question)] == [1.0]
    # but nothing in the passages decides "more often" (test_comparison reads that case)
    assert asked(question, answer, *MAGAZINES)[1] == ["undecided"]
    assert asked(question, "A manga anthology is published weekly.", *MAGAZINES)[1] == ["no_alternative"]


def test_the_alternative_whose_passage_holds_what_is_asked_is_favoured() -> None:
    question = "Which filmmaker was known for animation, Lev Yilmaz or Pamela B. Green?"
    passages = [
        "Lev Yilmaz\nLev Yilmaz is a filmmaker known for his animation shorts.",
        "Pamela B. Green\nPamela B. Green is a filmmaker and producer of documentaries.",
    ]
    score, _ = asked(question, "Lev Yilmaz.", *passages)
    assert score is not None and score >= 0.7
    score, reasons = asked(question, "Pamela B. Green.", *passages)
    assert score is not None and score <= 0.3 and reasons == ["not_favoured:Lev Yilmaz"]


def test_the_no_of_a_yes_no_answer_is_its_answer_not_a_negation_of_the_passage() -> None:
    question = "Are both Dafeng District and Dazhou located in Jiangsu?"
    passages = [
        "Dafeng District\nDafeng District is located in Jiangsu.",
        "Dazhou\nDazhou is a city in Sichuan.",
    ]
    answer = "No, Dafeng District and Dazhou are not both located in Jiangsu."
    (verdict,) = [best(row) for row in DEFAULT.verify([answer], passages, question)]
    assert verdict.score >= 0.5 and verdict.reason is None
    # the passages do not decide the question itself: "Sichuan" is not read as "not Jiangsu"
    assert asked(question, answer, *passages)[1] == ["undecided"]


def test_a_negation_is_read_in_the_sentence_the_claim_comes_from_not_the_one_before() -> None:
    """ "who" in the middle of a sentence refers back to nothing, and "not only" negates
    nothing (XQuAD answers flagged "negation" though their passages said the same)."""
    passage = (
        "Scholars who do not believe that Islam is merely a political ideology include Fred Halliday. "
        "Hayri Abaza argues the failure to distinguish between Islam and Islamism leads many in the West "
        "to support illiberal Islamic regimes, to the detriment of moderates who seek to separate religion "
        "from politics."
    )
    answer = (
        "The failure to distinguish Islam from Islamism leads many in the West "
        "to support illiberal Islamic regimes."
    )
    assert verdict(answer, passage) == (True, 1.0, [None])
    passage = (
        "Defining the East as inferior not only increased the West's sense of self, "
        "but also ordered the East."
    )
    assert verdict("Defining the East as inferior increased the West's sense of self.", passage)[2] == [None]
    assert verdict("Defining the East as inferior did not increase the West's sense of self.", passage)[
        2
    ] == ["negation"]


BRONCOS = (
    "The Broncos defeated the Pittsburgh Steelers in the divisional round. "
    "They beat the New England Patriots in the AFC Championship Game."
)


def test_an_answer_restating_the_question_is_read_where_its_own_words_come_from() -> None:
    """The words an answer adds to the question are read in the passage's sentence that
    holds them: the Steelers come from the divisional round, not the AFC Championship,
    though the answer restates the question's words around them."""
    question = "Who did the Broncos defeat in the AFC Championship game?"
    right, _ = asked(
        question, "The Broncos defeated the New England Patriots in the AFC Championship Game.", BRONCOS
    )
    wrong, _ = asked(
        question, "The Broncos defeated the Pittsburgh Steelers in the AFC Championship Game.", BRONCOS
    )
    assert right is not None and wrong is not None and right >= 0.5 and wrong < right - 0.1


def test_a_true_detail_the_question_did_not_ask_for_keeps_an_answer_certified() -> None:
    passage = "Paris is the capital of France. The city lies on the river Seine."
    score, reasons = asked("What is the capital of France?", passage, passage)
    assert score == 1.0 and reasons == [None, None]


def test_a_sentences_first_word_and_a_possessive_are_not_part_of_a_name() -> None:
    """ "Both Truth in Science ..." and "Bob Seger's 13th album" name "Truth in Science" and
    "Bob Seger", which the passage holds (HotpotQA answers flagged name_not_in_source)."""
    passage = "Truth in Science and the Discovery Institute embrace the Teach the Controversy campaign."
    assert verdict(
        "Both Truth in Science and Discovery embrace the Teach the Controversy campaign.", passage
    )[0]
    passage = "Against the Wind is the eleventh studio album by Bob Seger and the Silver Bullet Band."
    assert verdict("Against the Wind is an album of Bob Seger's band.", passage)[2] == [None]


@pytest.mark.parametrize("name", ["Selle v. Gibb", "Kapaun Mt. Carmel", "Gen. Grant", "Capt. Cook"])
def test_a_name_with_an_abbreviation_is_one_sentence(name: str) -> None:
    assert split_sentences(f"{name} was in the news. It was 1983.") == [
        f"{name} was in the news.",
        "It was 1983.",
    ]


def test_in_arabic_too_an_answer_is_read_where_its_own_words_come_from() -> None:
    question, passage = "ما هي عاصمة فرنسا؟", "باريس هي عاصمة فرنسا. برلين مدينة في ألمانيا."
    assert asked(question, "باريس هي عاصمة فرنسا.", passage) == (1.0, [None])
    score, _ = asked(question, "برلين هي عاصمة فرنسا.", passage)  # Berlin: read where Germany is
    assert score is not None and score < 0.5


def test_an_inflected_word_of_the_question_adds_nothing() -> None:
    """ "married" is the question's "marry": the answer restates the question (its first
    five letters, "marri" against "marry", made it a new word and the answer certified)."""
    question = "Who did the Star and Dagger bass player marry?"
    passages = ["Star and Dagger\nStar and Dagger is a band; its bass player is Sami Yaffa."]
    verdict = verify_answer("The Star and Dagger bass player married.", passages, question=question)
    assert verdict.score is not None and verdict.score <= 0.2 and not verdict.supported
    assert [v.reason for _, v in verdict.sentences] == ["restates_the_question"]
    # "bass" keeps its "ss"; "played" is "play"
    assert verify_answer("She played bass.", ["She plays bass in a band."]).supported
