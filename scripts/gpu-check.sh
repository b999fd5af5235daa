#!/usr/bin/env bash
#===- scripts/gpu-check.sh - Tests and benchmarks on the GPU machine ------===#
#
# Runs, from a folder made by scripts/gpu-stage.sh: every CUDA kernel test,
# the compiled plans on the CUDA backend against the CPU backend and the
# float64 reference, a CUDA decode of each tiny plan with k3-run and its
# launch-by-launch check against the CPU kernels (k3-run --check-against
# cpu), and the kernel benchmark at K3 sizes. Prints a short table; exits
# non-zero when a test fails or is skipped (K3C_REQUIRE_GPU=1: here a test
# that cannot run is a failure), naming each. Results (logs, JSON) go to
# $OUT when set, else /tmp/gpu-check.
#
#   scripts/gpu-check.sh [STAGE_DIR] [--no-bench] [--sanitize]
#
# --sanitize also runs compute-sanitizer (memcheck, then racecheck) over the
# launch-by-launch decode test, which runs every kernel of the tiny plans.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
STAGE=${1:-build/gpu-stage}
BENCH=1
SANITIZE=0
for a in "${@:2}"; do
  [ "$a" = "--no-bench" ] && BENCH=0
  [ "$a" = "--sanitize" ] && SANITIZE=1
done
OUTDIR=${OUT:-/tmp/gpu-check}
mkdir -p "$OUTDIR"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64
export K3C_REQUIRE_GPU=1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
# runLogged LABEL LOG CMD...: runs CMD (its stderr into LOG), marks the check
# failed when it exits non-zero, and prints LOG's last line after LABEL.
runLogged() {
  local label=$1 log=$2 line
  shift 2
  "$@" >/dev/null 2>"$log" || status=1
  line=$(tail -1 "$log")
  printf '%-20s %s\n' "$label" "${line#*: }"
}
printf '%-34s %8s %8s %8s\n' test passed failed skipped
export K3C_CUDA_TEST_PLANS=$STAGE/plans
for t in "$STAGE"/bin/cuda_test; do
  name=$(basename "$t")
  log="$OUTDIR/$name.log"
  "$t" >"$log" 2>&1
  rc=$?
  # gtest's closing counts ("[  PASSED  ] 70 tests.").
  count() { grep -o "^\[  $1 *\] [0-9]* test" "$log" | tail -1 | grep -o '[0-9]*' || echo 0; }
  pass=$(count PASSED)
  fail=$(count FAILED)
  skip=$(count SKIPPED)
  printf '%-34s %8s %8s %8s\n' "$name" "$pass" "$fail" "$skip"
  if [ $rc -ne 0 ] || [ "$fail" != 0 ] || [ "$skip" != 0 ] || [ "$pass" = 0 ]; then
    status=1
    echo "$name: exit $rc; failed or skipped (K3C_REQUIRE_GPU=1):"
    grep -E '^\[  (FAILED |SKIPPED) \] [A-Za-z]' "$log" |
      sed -e 's/ ([0-9]* ms)$//' -e 's/^/  /' | sort -u
    grep -B2 -A12 ': Failure$' "$log" | head -60
  fi
done

echo
printf '%-20s %s\n' plan "k3-run --backend cuda (64 tokens), then --check-against cpu (8 tokens)"
mkdir -p /tmp/k3-models
for model in tiny tiny-linear tiny-odd; do
  "$STAGE"/bin/k3-mkmodel $model -o /tmp/k3-models/$model >/dev/null 2>&1
  for fusion in none default max; do
    plan="$STAGE/plans/$model-$fusion.plan"
    runLogged "$model-$fusion" "$OUTDIR/k3-run-$model-$fusion.log" \
      "$STAGE"/bin/k3-run "$plan" --weights /tmp/k3-models/$model \
      --prompt-ids 1,17,300,42 --max-new 64 --backend cuda
    runLogged "" "$OUTDIR/k3-run-check-$model-$fusion.log" \
      "$STAGE"/bin/k3-run "$plan" --weights /tmp/k3-models/$model \
      --prompt-ids 1,17,300,42 --max-new 8 --backend cuda --check-against cpu
  done
done

# A tensor-parallel model (k3c --tp 2): both ranks' plans on the one GPU,
# their collectives host-staged; k3-run fails unless every rank chose the
# same ids (cuda_test compares them with the whole plan's).
for model in tiny tiny-linear; do
  r0="$STAGE/plans/$model-default-tp2-r0.plan"
  [ -f "$r0" ] || continue
  runLogged "$model-tp2" "$OUTDIR/k3-run-$model-tp2.log" \
    "$STAGE"/bin/k3-run "$r0" "$STAGE/plans/$model-default-tp2-r1.plan" \
    --weights /tmp/k3-models/$model --prompt-ids 1,17,300,42 --max-new 64 \
    --backend cuda
done

# The real-geometry slice (gpu-stage.sh): every kernel of a Kimi-Linear
# layer at its real shapes, the clustered kda_decode among them, against the
# CPU kernels launch by launch, over synthetic weights.
plan="$STAGE/plans/kimi-linear-48b-l4-e8-default.plan"
if [ -f "$plan" ]; then
  runLogged kimi-linear-l4-e8 "$OUTDIR/k3-run-check-kimi-linear-l4.log" \
    "$STAGE"/bin/k3-run "$plan" --weights synthetic:3 \
    --prompt-ids 1,17,300,42 --max-new 4 --backend cuda --check-against cpu
fi

# The same for K3's 4-layer slice: AttnRes at K3's width on its cluster, the
# latent MoE's MXFP4 experts, K3's MLA heads.
plan="$STAGE/plans/k3-l4-e8-default.plan"
if [ -f "$plan" ]; then
  runLogged k3-l4-e8 "$OUTDIR/k3-run-check-k3-l4.log" \
    "$STAGE"/bin/k3-run "$plan" --weights synthetic:3 \
    --prompt-ids 1,17,300,42 --max-new 4 --backend cuda --check-against cpu
fi

if [ $SANITIZE = 1 ]; then
  echo
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 3 \
      "$STAGE"/bin/cuda_test --gtest_filter='*LaunchByLaunch*tiny_default*:*LaunchByLaunch*tiny_linear_none*' \
      >"$OUTDIR/sanitize-$tool.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    printf 'compute-sanitizer %-10s exit %d: %s\n' $tool $rc \
      "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTDIR/sanitize-$tool.log" | tail -1)"
  done
fi

if [ $BENCH = 1 ]; then
  echo
  "$STAGE"/bin/kernel_bench --json "$OUTDIR/kernel_bench.json" || status=1
fi
echo
[ $status = 0 ] && echo "gpu-check: OK" || echo "gpu-check: FAILED (see above; logs in $OUTDIR)"
exit $status
