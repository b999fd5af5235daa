#!/usr/bin/env bash
#===- scripts/demo.sh - The main job on the embedded tiny model ----------===#
#
# Makes the tiny default model, compiles it with k3c (each fusion strategy,
# the default one to an executable), prints the kernel report, and decodes
# 64 tokens on the CPU backend with the executable.
#
#===----------------------------------------------------------------------===#
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-$BUILD/demo}
BIN=$BUILD/bin
mkdir -p "$OUT"

echo "== k3-mkmodel tiny -> $OUT/tiny"
"$BIN/k3-mkmodel" tiny -o "$OUT/tiny" --seed 1 >/dev/null

for f in none default max; do
  "$BIN/k3c" "$OUT/tiny" --fusion=$f -o "$OUT/tiny-$f.plan"
  n=$(grep -o '"kernel"' "$OUT/tiny-$f.plan" | wc -l)
  echo "== k3c --fusion=$f: $n launches per token -> $OUT/tiny-$f.plan"
done

echo "== k3c --emit=exe --fusion=default --report -> $OUT/tiny-model"
"$BIN/k3c" "$OUT/tiny" --fusion=default --emit=exe -o "$OUT/tiny-model" --report

echo "== ./tiny-model --weights $OUT/tiny --prompt-ids 1,17,300,42 --max-new 64 (CPU backend)"
"$OUT/tiny-model" --weights "$OUT/tiny" --prompt-ids 1,17,300,42 --max-new 64
