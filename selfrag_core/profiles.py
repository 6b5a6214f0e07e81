"""Model profiles: what a model can do, and the strategy sizes that follow from it.

A :class:`ModelProfile` says how large the model's context window is, whether it keeps
to JSON, whether its decoding is deterministic and whether it writes ``[n]`` citation
markers. The sizes of the strategies follow from it (``top_k``, ``fast_mode``,
``hypothetical_docs``, ``decompose``, ...), so that a small local model is not asked
for what it cannot do, while capable models keep the specification's defaults
(:data:`CAPABLE`, whose sizes are exactly those defaults).

    profile_of(llm)                  # the LLM's own ``profile``, else CAPABLE
    ModelProfile("mine", context_window=4096, follows_json=False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.validation import check_int

#: a context window below this many tokens is small: five 1000-character passages
#: (about 1,500 tokens) plus the instructions barely fit in 2048
_SMALL_CONTEXT = 4096


@dataclass(frozen=True)
class ModelProfile:
    """What a model can do (its context window in tokens, whether it follows JSON,
    whether decoding is deterministic, whether it cites ``[n]``); the derived properties
    size the strategies for it.

    The defaults describe a capable model: every derived size is then the
    specification's default. Raises ConfigurationError for a context window that is
    not an int of at least 512, TypeError for a name that is not a string or a flag
    that is not a bool.
    """

    name: str = "capable"
    context_window: int = 8192
    follows_json: bool = True
    deterministic: bool = False
    cites: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}; pass e.g. name='small'")
        if not self.name.strip():
            raise ConfigurationError("name is empty; pass a short name for the profile, e.g. name='small'")
        check_int("context_window", self.context_window, 512)
        for flag in ("follows_json", "deterministic", "cites"):
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be True or False, got {value!r}")

    @property
    def small_context(self) -> bool:
        """Whether the context window is under 4096 tokens (few passages fit in a prompt)."""
        return self.context_window < _SMALL_CONTEXT

    @property
    def top_k(self) -> int:
        """Passages retrieved per search: 3 in a small context window (five passages and
        the instructions would crowd out the answer, or lose the prompt's middle), else 5
        (the specification's default)."""
        return 3 if self.small_context else 5

    @property
    def fast_mode(self) -> bool:
        """Whether Self-RAG answers and judges in one JSON reply: only for a model that
        follows JSON (one that does not answers worse inside a JSON object)."""
        return self.follows_json

    @property
    def hypothetical_docs(self) -> int:
        """Hypothetical documents HyDE writes: 1 when decoding is deterministic (greedy
        decoding gives identical passages for identical prompts, so a second one costs
        a call and adds nothing), else 3 (the specification's default)."""
        return 1 if self.deterministic else 3

    @property
    def decompose(self) -> bool:
        """Whether RecursiveRAG may split a question into sub-questions: only for a model
        that follows JSON (others write junk sub-question lists)."""
        return self.follows_json

    @property
    def trusts_judge(self) -> bool:
        """Whether the model's own judgement may overrule the grounding signals: only a
        model that follows JSON. One that does not walks the judge's schema (1, 2, 3, 4)
        instead of judging, so Self-RAG stops at a well-supported first answer without
        asking it (``SelfRAGConfig.stop_when_supported``)."""
        return self.follows_json

    @property
    def refinement_iterations(self) -> int:
        """Self-RAG's refinement rounds: 2 for a model that does not follow JSON (its
        critiques are rough, and later rounds rarely improve the answer), else 3 (the
        specification's default)."""
        return 3 if self.follows_json else 2

    @property
    def healing_retries(self) -> int:
        """Strategies SelfHealingRAG tries after the first: 1 for a model that does not
        follow JSON (its faithfulness judgements are rough, so more retries mostly cost
        time), else 2 (the specification's default)."""
        return 2 if self.follows_json else 1


#: a capable model (a hosted or large one): the specification's defaults
CAPABLE = ModelProfile()
#: the embedded local models (SmolLM2-135M, Gemma 3 270M): a 2048-token context, no
#: reliable JSON, greedy decoding, no ``[n]`` markers
SMALL_LOCAL = ModelProfile("small", context_window=2048, follows_json=False, deterministic=True, cites=False)


def profile_of(llm: Any, default: ModelProfile = CAPABLE) -> ModelProfile:
    """The profile ``llm`` declares in its ``profile`` attribute when that is a
    :class:`ModelProfile`, else ``default`` (a capable model)."""
    profile = getattr(llm, "profile", None)
    return profile if isinstance(profile, ModelProfile) else default
