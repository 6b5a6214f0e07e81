"""Evaluation metrics against values computed by hand (in the comments)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from selfrag_core.evaluation.metrics import (
    PairedDifference,
    answer_contains_gold,
    doc_ids,
    exact_match,
    mrr,
    ndcg_at_k,
    normalize_answer,
    paired_difference,
    percentile,
    recall_at_k,
    token_f1,
)

# -- answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Denver Broncos!", "denver broncos"),
        ("an apple a day", "apple day"),
        ("Theatre, then a theme", "theatre then theme"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("rock-and-roll", "rockandroll"),  # punctuation is deleted, not made a space
        ("  \tMixed\nCASE  ", "mixed case"),
        ("", ""),
        ("“Sea turtles nest on beaches.” [2]", "sea turtles nest on beaches 2"),  # a quoted answer
        ("Paris — «la capitale», ¿no?", "paris la capitale no"),  # Unicode's punctuation too
        ("5 € ≥ 3", "5 € ≥ 3"),  # symbols are not punctuation
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_a_quoted_answer_scores_as_its_words() -> None:
    # six tokens, two of them the gold's: precision 1/3, recall 1
    assert token_f1("“Sea turtles nest on beaches.” [2]", ["sea turtles"]) == pytest.approx(0.5)
    assert answer_contains_gold("“Paris” [1]", ["Paris"]) == 1.0


def test_exact_match() -> None:
    assert exact_match("the Denver Broncos.", ["Denver Broncos"]) == 1.0
    assert exact_match("Broncos", ["Denver Broncos"]) == 0.0
    assert exact_match("Broncos", ["Denver Broncos", "broncos!"]) == 1.0  # the best gold
    assert exact_match("anything", []) is None


def test_token_f1() -> None:
    # pred {denver, broncos, team}, gold {denver, broncos}: P = 2/3, R = 1, F1 = 2PR/(P+R) = 0.8
    assert token_f1("Denver Broncos team", ["the Denver Broncos"]) == pytest.approx(0.8)
    # repeated tokens count once each: common = min counts = cat 1 + dog 1 = 2; P = R = 2/3
    assert token_f1("cat cat dog", ["cat dog dog"]) == pytest.approx(2 / 3)
    # the best gold wins: 0.0 against the first, 0.8 against the second
    assert token_f1("Denver Broncos team", ["Carolina", "Denver Broncos"]) == pytest.approx(0.8)
    assert token_f1("Carolina Panthers", ["Denver Broncos"]) == 0.0
    assert token_f1("The Denver, Broncos", ["denver broncos"]) == 1.0
    assert token_f1("anything", []) is None


def test_token_f1_when_a_gold_normalises_to_nothing() -> None:
    assert token_f1("", ["The"]) == 1.0  # agrees with exact match
    assert exact_match("", ["The"]) == 1.0
    assert token_f1("Paris", ["The"]) == 0.0


def test_answer_contains_gold_finds_a_whole_token_span() -> None:
    # "the denver broncos won" -> "denver broncos won": "denver broncos" is its first two tokens
    assert answer_contains_gold("The Denver Broncos won the game", ["Denver Broncos"]) == 1.0
    assert answer_contains_gold("The answer is 1916.", ["1916"]) == 1.0  # "answer is 1916"
    assert answer_contains_gold("The answer is 1916.", ["191"]) == 0.0  # a part of a token is not a match
    assert answer_contains_gold("It was Kenyan.", ["Kenya"]) == 0.0
    assert answer_contains_gold("Broncos Denver", ["Denver Broncos"]) == 0.0  # the tokens in order
    assert answer_contains_gold("Carolina Panthers", ["Denver Broncos"]) == 0.0
    # articles, punctuation and case are normalised on both sides:
    # "In 1916, the U.S.A. joined" -> "in 1916 usa joined"; "The u.s.a!" -> "usa"
    assert answer_contains_gold("In 1916, the U.S.A. joined", ["The u.s.a!"]) == 1.0
    assert answer_contains_gold("He said: an APPLE, a day.", ["apple day"]) == 1.0  # "he said apple day"


MAGAZINES = "Which magazine is published more often, Shonen Jump or Rolling Stone?"


def test_an_answer_to_a_choice_is_judged_by_its_pick() -> None:
    # both names are in it, and it picks the other one (HotpotQA's comparison questions)
    wrong = "Shonen Jump is published more often than Rolling Stone."
    assert answer_contains_gold(wrong, ["Rolling Stone"]) == 1.0  # words alone
    assert answer_contains_gold(wrong, ["Rolling Stone"], MAGAZINES) == 0.0
    right = "Rolling Stone is published more often than Shonen Jump."
    assert answer_contains_gold(right, ["Rolling Stone"], MAGAZINES) == 1.0
    # the gold names an alternative in full ("Kenneth Eliot Flach" for "Ken Flach")
    tennis = "Which tennis player is from a country closer to Canada, Ken Flach or Lucie Safarova?"
    assert answer_contains_gold("Ken Flach, an American.", ["Kenneth Eliot Flach"], tennis) == 1.0
    assert answer_contains_gold("Lucie Safarova.", ["Kenneth Eliot Flach"], tennis) == 0.0
    # no pick made, or a gold that is neither alternative: the words decide, as before
    assert answer_contains_gold("I cannot tell.", ["Rolling Stone"], MAGAZINES) == 0.0
    cases = "Which case was decided first, Selle v. Gibb or Reynolds v. Sims?"
    assert answer_contains_gold("In 1964, Reynolds v. Sims.", ["1964"], cases) == 1.0


def test_an_answer_to_a_yes_no_question_is_judged_by_its_opening() -> None:
    question = "Are Broughtonia and Laeliocattleya both orchids?"
    both = 'No, the answer is not "Yes."'  # holds "yes" and "no"
    assert answer_contains_gold(both, ["yes"]) == 1.0  # words alone
    assert answer_contains_gold(both, ["yes"], question) == 0.0
    assert answer_contains_gold(both, ["no"], question) == 1.0
    assert answer_contains_gold("Yes, both are orchids; no doubt.", ["yes"], question) == 1.0
    # an answer that opens with neither: its words, as before
    assert answer_contains_gold("Both are orchids, yes.", ["yes"], question) == 1.0


def test_answer_contains_gold_takes_the_best_gold() -> None:
    assert answer_contains_gold("Kenya and Tanzania", ["Uganda", "tanzania"]) == 1.0
    assert answer_contains_gold("Kenya and Tanzania", ["Uganda", "Tanzanian"]) == 0.0
    assert answer_contains_gold("anything", []) is None


def test_answer_contains_gold_when_a_gold_normalises_to_nothing() -> None:
    assert answer_contains_gold("", ["The"]) == 1.0  # as exact match: nothing contains nothing
    assert answer_contains_gold("Paris", ["The"]) == 0.0  # the padded "  " is not in " paris "


# -- retrieval -----------------------------------------------------------------------


def test_doc_ids_removes_repeats_keeping_first_positions() -> None:
    assert doc_ids(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]
    assert doc_ids([]) == []


def test_recall_at_k_counts_distinct_ids() -> None:
    ranked = ["d1", "d1", "d2", "d3", "d4"]
    relevant = {"d2": 1.0, "d4": 2.0, "d9": 0.0}  # d9 judged, not relevant
    # distinct: d1 d2 d3 d4; the first 2 hold d2 of {d2, d4}
    assert recall_at_k(ranked, relevant, 2) == 0.5
    assert recall_at_k(ranked, relevant, 3) == 0.5
    assert recall_at_k(ranked, relevant, 4) == 1.0
    assert recall_at_k(ranked, relevant, 100) == 1.0
    assert recall_at_k(["x"], {"d2": 1.0, "d4": 1.0, "d5": 1.0}, 1) == 0.0
    assert recall_at_k(ranked, {"d9": 0.0}, 5) is None
    assert recall_at_k(ranked, {}, 5) is None
    with pytest.raises(ValueError, match="k must be at least 1"):
        recall_at_k(ranked, relevant, 0)


def test_ndcg_at_k_by_hand() -> None:
    relevant = {"d1": 2.0, "d2": 1.0, "d5": 1.0}
    # ranked d3 d1 d2: DCG = 0/log2(2) + 2/log2(3) + 1/log2(4) = 1.26186 + 0.5 = 1.76186
    # ideal 2 1 1:    IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.63093 + 0.5 = 3.13093
    # nDCG@3 = 1.76186 / 3.13093 = 0.562727
    assert ndcg_at_k(["d3", "d1", "d2"], relevant, 3) == pytest.approx(0.562727, abs=1e-6)
    # k = 1: DCG = 0, and with d2 first: DCG = 1, IDCG = 2
    assert ndcg_at_k(["d3", "d1"], relevant, 1) == 0.0
    assert ndcg_at_k(["d2", "d1"], relevant, 1) == 0.5
    # the ideal ranking scores 1, with extra unjudged ids after it
    assert ndcg_at_k(["d1", "d2", "d5", "x", "y"], relevant) == pytest.approx(1.0)


def test_ndcg_counts_a_repeated_id_once() -> None:
    # distinct d1 d2 is the ideal ranking: 1.0; counting d1 twice would give more than 1
    assert ndcg_at_k(["d1", "d1", "d2"], {"d1": 2.0, "d2": 1.0}) == pytest.approx(1.0)


def test_ndcg_none_and_zero() -> None:
    assert ndcg_at_k(["d1"], {}) is None
    assert ndcg_at_k(["d1"], {"d1": 0.0}) is None
    assert ndcg_at_k([], {"d1": 1.0}) == 0.0


def test_mrr() -> None:
    relevant = {"r": 1.0, "judged_out": 0.0}
    # distinct: x y judged_out r -> the first relevant at rank 4 (rank 6 counting repeats)
    ranked = ["x", "x", "y", "judged_out", "y", "r"]
    assert mrr(ranked, relevant) == 0.25
    assert mrr(ranked, relevant, k=4) == 0.25
    assert mrr(ranked, relevant, k=3) == 0.0
    assert mrr(["r", "x"], relevant, k=1) == 1.0
    assert mrr([], relevant) == 0.0
    assert mrr(ranked, {"judged_out": 0.0}) is None
    with pytest.raises(ValueError):
        mrr(ranked, relevant, k=0)


# -- paired bootstrap ----------------------------------------------------------------


def noisy_scores(shift: float, n: int = 60) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(123)
    baseline = rng.uniform(0.2, 0.6, n)
    contender = baseline + shift + rng.normal(0.0, 0.05, n)
    return [float(x) for x in contender], [float(x) for x in baseline]


def test_clearly_better_contender() -> None:
    contender, baseline = noisy_scores(0.2)
    result = paired_difference(contender, baseline)
    assert result is not None
    assert result.mean == pytest.approx(0.2, abs=0.02)
    assert 0 < result.low < result.mean < result.high
    assert result.verdict == "better"
    assert (result.n, result.confidence) == (60, 0.95)


def test_clearly_worse_contender() -> None:
    contender, baseline = noisy_scores(-0.2)
    result = paired_difference(contender, baseline)
    assert result is not None
    assert result.low < result.mean < result.high < 0
    assert result.verdict == "worse"


def test_noise_around_zero_is_no_detectable_difference() -> None:
    # differences +0.3, -0.3, ... : mean 0
    contender = [0.8, 0.2] * 20
    baseline = [0.5] * 40
    result = paired_difference(contender, baseline)
    assert result is not None
    assert result.mean == pytest.approx(0.0, abs=1e-12)
    assert result.low < 0 < result.high
    assert result.verdict == "no detectable difference"


def test_interval_matches_the_normal_approximation() -> None:
    # differences 0 and 1 alternating, n = 100: mean 0.5, standard error sqrt(0.25 / 100) = 0.05,
    # so the 95% interval is about 0.5 +- 1.96 * 0.05 = [0.402, 0.598]
    result = paired_difference([0.0, 1.0] * 50, [0.0] * 100)
    assert result is not None
    assert result.low == pytest.approx(0.402, abs=0.02)
    assert result.high == pytest.approx(0.598, abs=0.02)


def test_interval_with_many_pairs_drawn_in_blocks() -> None:
    # n = 3000: standard error 0.5 / sqrt(3000) = 0.00913, interval 0.5 +- 0.0179; 2001 resamples
    # are drawn in several blocks (the block size caps the memory)
    result = paired_difference([0.0, 1.0] * 1500, [0.0] * 3000, resamples=2001)
    assert result is not None
    assert result.low == pytest.approx(0.5 - 0.0179, abs=0.004)
    assert result.high == pytest.approx(0.5 + 0.0179, abs=0.004)


def test_unknown_pairs_are_dropped() -> None:
    nan, inf = math.nan, math.inf
    contender = [1.0, None, 0.5, nan, 0.9, 0.4, 0.7]
    baseline = [0.5, 0.1, None, 0.3, inf, 0.4, 0.2]
    result = paired_difference(contender, baseline)
    assert result is not None
    # kept: (1.0, 0.5), (0.4, 0.4), (0.7, 0.2): differences 0.5, 0.0, 0.5
    assert result.n == 3
    assert result.mean == pytest.approx(1 / 3)
    assert paired_difference([None, nan], [0.1, 0.2]) is None
    assert paired_difference([], []) is None


def test_one_pair_or_equal_differences_give_a_point_interval() -> None:
    single = paired_difference([0.9], [0.4])
    assert single is not None
    assert (single.low, single.mean, single.high, single.n) == pytest.approx((0.5, 0.5, 0.5, 1))
    assert single.verdict == "no detectable difference"  # one question proves nothing

    constant = paired_difference([0.6] * 5, [0.5] * 5)
    assert constant is not None
    assert constant.low == constant.high == constant.mean == pytest.approx(0.1)
    assert constant.verdict == "better"


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="same questions: 2 != 3"):
        paired_difference([0.1, 0.2], [0.1, 0.2, 0.3])


@pytest.mark.parametrize(("option", "value"), [("confidence", 1.0), ("confidence", 0.0), ("resamples", 0)])
def test_bad_options_raise(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        paired_difference([0.1, 0.2], [0.2, 0.1], **{option: value})  # type: ignore[arg-type]


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    contender, baseline = noisy_scores(0.01, n=25)
    first = paired_difference(contender, baseline, seed=7)
    assert first == paired_difference(contender, baseline, seed=7)
    other = paired_difference(contender, baseline, seed=8)
    assert other is not None and first is not None
    assert other.mean == first.mean
    assert (other.low, other.high) != (first.low, first.high)


def test_lower_is_better() -> None:
    # latencies in seconds: the contender is 0.1 s faster on every question, give or take
    faster, slower = noisy_scores(-0.1)
    result = paired_difference(faster, slower, higher_is_better=False)
    assert result is not None
    assert result.high < 0
    assert result.verdict == "better"
    reverse = paired_difference(slower, faster, higher_is_better=False)
    assert reverse is not None and reverse.verdict == "worse"


def test_verdict_and_to_dict() -> None:
    assert PairedDifference(0.1, 0.01, 0.2, 10, 0.95).verdict == "better"
    assert PairedDifference(0.1, -0.01, 0.2, 10, 0.95).verdict == "no detectable difference"
    assert PairedDifference(-0.1, -0.2, -0.01, 10, 0.95).verdict == "worse"
    assert PairedDifference(-0.1, -0.2, -0.01, 10, 0.95, higher_is_better=False).verdict == "better"
    assert PairedDifference(0.1, 0.01, 0.2, 10, 0.95, higher_is_better=False).verdict == "worse"
    assert PairedDifference(1 / 3, 0.1234567, 0.5, 10, 0.95).to_dict() == {
        "mean": 0.333333,
        "low": 0.123457,
        "high": 0.5,
        "n": 10,
        "confidence": 0.95,
        "verdict": "better",
    }


# -- percentile ----------------------------------------------------------------------


def test_percentile_interpolates_linearly() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5  # halfway between 2 and 3
    # position 0.95 * (4 - 1) = 2.85 in 1 2 3 4: 3 + 0.85 * (4 - 3)
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile(values, 101)


# -- issue 54: a correctness metric that restating the question cannot raise ----------

TELEONCOLOGY = "Do teleoncology models of care enable safe delivery of chemotherapy in rural towns?"
TELE_GOLD = [
    "Teleoncology models of care enable safe delivery of chemotherapy in rural towns with lower travel."
]


def test_restating_the_question_raises_f1_but_not_new_word_f1() -> None:
    from selfrag_core.evaluation.metrics import new_word_f1

    restated = f'The answer to the question "{TELEONCOLOGY}" is: No.'
    plain = "The answer to this question is: No."
    assert token_f1(restated, TELE_GOLD) > token_f1(plain, TELE_GOLD) + 0.3  # what the issue saw
    assert new_word_f1(restated, TELE_GOLD, TELEONCOLOGY) == 0.0
    assert new_word_f1(plain, TELE_GOLD, TELEONCOLOGY) == 0.0
    # "yes with lower travel" against "with lower travel": precision 3/4, recall 1
    assert new_word_f1("Yes, with lower travel.", TELE_GOLD, TELEONCOLOGY) == pytest.approx(6 / 7)


def test_new_word_f1_of_a_gold_made_of_the_questions_words_is_plain_f1() -> None:
    from selfrag_core.evaluation.metrics import new_word_f1

    assert new_word_f1("Paris", ["Paris"], "Is Paris the capital?") == token_f1("Paris", ["Paris"])
    assert new_word_f1("anything", [], "Is Paris the capital?") is None


@pytest.mark.parametrize(
    ("answer", "decision", "expected"),
    [
        ("No, it does not.", "no", 1.0),
        ("The answer to this question is: No.", "no", 1.0),
        (f'The answer to the question "{TELEONCOLOGY}" is: No.', "yes", 0.0),
        ("There is no evidence either way.", "no", 0.0),  # a "no" inside says no decision
        ("Yes.", "maybe", None),
        ("Yes.", None, None),
    ],
)
def test_the_yes_no_decision(answer: str, decision: str | None, expected: float | None) -> None:
    from selfrag_core.evaluation.metrics import decision_match

    assert decision_match(answer, decision) == expected


def test_a_jsonl_question_carries_its_decision(tmp_path: Path) -> None:
    from selfrag_core.evaluation.data import load_jsonl

    path = tmp_path / "q.jsonl"
    lines = [
        {"id": "a", "question": "Is it?", "answers": ["It is."], "decision": "Yes"},
        {"id": "b", "question": "Is it not?", "decision": "perhaps"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    data = load_jsonl(path)
    assert [q.decision for q in data.questions] == ["yes"]
    assert data.has_decisions()
    assert any("decision" in p.message for p in data.problems)
