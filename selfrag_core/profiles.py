"""Model profiles: what a model can do.

A :class:`ModelProfile` says how large the model's context window is, whether it keeps
to JSON, whether its decoding is deterministic and whether it writes ``[n]`` citation
markers. Each strategy's config sizes itself from it (``SelfRAGConfig.for_profile(profile)``,
``HyDERAGConfig.for_profile(profile)``, ...: :mod:`selfrag_core.config`), so that a small
local model is not asked for what it cannot do, while capable models keep the
specification's defaults (:data:`CAPABLE`, for which every ``for_profile`` is the
config's defaults).

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
    whether decoding is deterministic, whether it cites ``[n]``); the strategies' configs
    size themselves for it (``for_profile``).

    The defaults describe a capable model: every config's ``for_profile`` is then the
    specification's defaults. Raises ConfigurationError for a context window that is
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
