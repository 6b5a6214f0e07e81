"""``selfrag eval``: which strategy, on your data, with your model, at what cost.

    from selfrag_core.evaluation import EvalSettings, evaluate
    report = evaluate("questions.jsonl", ["plain", "self", "recursive"], llm=llm, corpus="corpus.jsonl",
                      settings=EvalSettings(cache="calls.sqlite", output="eval-out"))
    print(report.table())

Questions come as JSONL, a BEIR folder or SQuAD JSON (:mod:`.data`); contenders are
the built-in strategies by name, your own strategies, LangChain runnables, LlamaIndex
query engines or callables (:mod:`.contenders`); every result is compared with the
baseline ``plain`` (one retrieval, one answer) question by question, with a bootstrap
95% interval and a verdict (:mod:`.metrics`, :mod:`.report`); every LLM call can be
recorded and replayed (:class:`~selfrag_core.replay.CachedLLM`). How a run goes (the
sample, the cache, the concurrency, the output) is one frozen, validated
:class:`~.settings.EvalSettings` (:mod:`.settings`). An application module: it uses
the library and the embedded store, never the reverse.
"""

from selfrag_core.evaluation.contenders import Contender, ContenderOutputError, Outcome
from selfrag_core.evaluation.data import (
    CorpusDoc,
    EvalData,
    EvalQuestion,
    InputProblem,
    load_beir,
    load_corpus,
    load_jsonl,
    load_questions,
    load_squad,
)
from selfrag_core.evaluation.gate import assert_no_regression, compare_runs
from selfrag_core.evaluation.report import EvalReport, MetricInfo
from selfrag_core.evaluation.runner import DEFAULT_CONTENDERS, evaluate
from selfrag_core.evaluation.settings import EvalSettings

__all__ = [
    "DEFAULT_CONTENDERS",
    "Contender",
    "ContenderOutputError",
    "CorpusDoc",
    "EvalData",
    "EvalQuestion",
    "EvalReport",
    "EvalSettings",
    "InputProblem",
    "MetricInfo",
    "Outcome",
    "assert_no_regression",
    "compare_runs",
    "evaluate",
    "load_beir",
    "load_corpus",
    "load_jsonl",
    "load_questions",
    "load_squad",
]
