#!/usr/bin/env bash
# The tables of `selfrag eval` with the default local model (SmolLM2-135M, MiniLM):
# every strategy against a plain retrieve-and-answer on 60 XQuAD questions and 60 HotpotQA
# questions (answer F1; supporting-paragraph recall@10 of the documents used), and HyDE's
# fused ranking against plain retrieval on the 300 SciFact test queries (nDCG@10).
#
#     bash benchmarks/eval_tables.sh            # hours of CPU the first time (2-5 s an LLM call)
#     bash benchmarks/eval_tables.sh --replay   # again from the recorded calls: minutes, no LLM call
#     SETS=do-no-harm bash benchmarks/eval_tables.sh   # issue 19's measurement: 100 HotpotQA, 100 XQuAD
#                                                      # (shared replies; eval-results/*100$SUFFIX, "-shared")
#
# Every LLM call is recorded in $CACHE (default ~/.cache/selfrag/eval-tables.sqlite), so an
# interrupted run resumes where it stopped; the corpora are indexed once into $INDEXES.
# Reads the data in ../shared/data (never shipped). Results: eval-results/<name>/.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
CACHE="${CACHE:-$HOME/.cache/selfrag/eval-tables.sqlite}"
INDEXES="${INDEXES:-$HOME/.cache/selfrag/eval-indexes}"
SELFRAG="${SELFRAG:-.venv/bin/selfrag}"
common=(--llm local --cache "$CACHE" --concurrency 1 --plain "$@")

if [[ "${SETS:-}" == "do-no-harm" ]]; then
    # shared replies: one prompt, one reply in every contender (the local model's replies vary
    # from call to call; a difference must be the strategy's); reuses plain's recordings first
    suffix="${SUFFIX:--shared}"
    "$SELFRAG" eval "$DATA/hotpotqa_500/beir" --limit 100 --index "$INDEXES/hotpotqa" \
        --out "eval-results/hotpot100$suffix" --shared-replies "${common[@]}"
    "$SELFRAG" eval "$DATA/xquad_en/xquad.en.json" --limit 100 --index "$INDEXES/xquad" \
        --out "eval-results/xquad100$suffix" --shared-replies "${common[@]}"
    exit 0
fi
"$SELFRAG" eval "$DATA/xquad_en/xquad.en.json" --limit 60 --index "$INDEXES/xquad" \
    --out eval-results/xquad "${common[@]}"
"$SELFRAG" eval "$DATA/scifact" --strategies plain,hyde --index "$INDEXES/scifact" \
    --out eval-results/scifact "${common[@]}"
"$SELFRAG" eval "$DATA/hotpotqa_500/beir" --limit 60 --index "$INDEXES/hotpotqa" \
    --out eval-results/hotpotqa "${common[@]}"
