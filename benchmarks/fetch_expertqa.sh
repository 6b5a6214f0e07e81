#!/usr/bin/env bash
# Fetches ExpertQA's long-form files with claim-level labels (data/lfqa/{domain,rand}_{val,test}.jsonl)
# from the public repository chaitanyamalaviya/ExpertQA into DIR (never committed: DIR is yours).
# EXPERTQA_REPO: a git copy of it to read instead of cloning (a clone or a bare mirror).
#   bash benchmarks/fetch_expertqa.sh data/expertqa
# Fit on *_val (benchmarks/checks_expertqa.py --fit); report on *_test and never tune on it.
set -euo pipefail
out="${1:?usage: fetch_expertqa.sh DIR}"
src="${EXPERTQA_REPO:-}"
if [ -z "$src" ]; then
  for guess in ../.mirror/chaitanyamalaviya+ExpertQA/repo "$out/.repo"; do
    [ -d "$guess" ] && src="$guess" && break
  done
fi
if [ -z "$src" ]; then
  src="$out/.repo"
  git clone --quiet --bare --depth 1 https://github.com/chaitanyamalaviya/ExpertQA "$src"
fi
mkdir -p "$out"
for f in domain_val domain_test rand_val rand_test; do
  git -C "$src" show "HEAD:data/lfqa/$f.jsonl" > "$out/$f.jsonl"
done
wc -l "$out"/*.jsonl
