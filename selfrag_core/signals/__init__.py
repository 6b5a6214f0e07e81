"""The LLM-free signals, in layers: text (tokens, stems, sentences), then the fitted
checks over it (support, answering: :mod:`selfrag_core.signals.fitted`)."""
