#!/usr/bin/env bash
# gpu_check.sh: the checks that need an NVIDIA GPU, in one run of at most
# 5 minutes. Run from the repository root on a machine with a GPU:
#
#   benchmarks/gpu_check.sh
#
# 1. Fails at once (exit 2) when nvidia-smi is missing or lists no GPU.
# 2. Configures and builds build-gpu (Release) with the CUDA backend; fails
#    if the CUDA toolkit was not found (the backend would be missing).
# 3. nvidia-smi: GPU, driver, memory.
# 4. The CUDA parity tests: backend_test --gtest_filter='*Cuda*:BackendFactoryTest.*',
#    and every model's gradient checks and training steps on the GPU
#    (mlp_test, sparse_logreg_test, mf_test)
#    (every op against a float64 reference, relative error < 1e-4); a
#    skipped CUDA case counts as a failure here.
# 5. gemm_bench: SGEMM GFLOP/s for 1024/2048/4096 on cpu and cuda.
# Prints a summary table; exits non-zero when any step failed.
set -uo pipefail

readonly DEADLINE=$((SECONDS + 300))
readonly BUILD_DIR=build-gpu
LOG_DIR=$(mktemp -d)
readonly LOG_DIR

fail() {
  echo "gpu_check: FAIL: $1" >&2
  exit "${2:-1}"
}

# Seconds left of the 5-minute budget (at least 1).
left() {
  local s=$((DEADLINE - SECONDS))
  ((s > 0)) && echo "$s" || echo 1
}

[[ -f CMakeLists.txt && -d worker/cuda ]] || fail "run from the repository root" 2

if ! command -v nvidia-smi > /dev/null 2>&1; then
  fail "nvidia-smi not found: no NVIDIA driver on this machine, so no GPU to check" 2
fi
if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<< "$gpus"; then
  fail "nvidia-smi lists no GPU: ${gpus}" 2
fi

# The toolkit is often installed but not on PATH.
if ! command -v nvcc > /dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

echo "== configure and build ($BUILD_DIR)"
timeout "$(left)" cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > "$LOG_DIR/configure.log" 2>&1 ||
  { tail -30 "$LOG_DIR/configure.log"; fail "cmake configure failed (log above)"; }
grep -q 'CUDA toolkit found' "$LOG_DIR/configure.log" ||
  fail "cmake did not find the CUDA toolkit (nvcc on PATH?), so the CUDA backend would not be built"
# Only the programs this check runs: the full tree takes longer than the budget allows.
timeout "$(left)" cmake --build "$BUILD_DIR" -j "$(nproc)" --target backend_test mlp_test sparse_logreg_test mf_test gemm_bench \
  > "$LOG_DIR/build.log" 2>&1 ||
  { tail -40 "$LOG_DIR/build.log"; fail "build failed (log above)"; }
[[ -f "$BUILD_DIR/worker/cuda/libps_cuda_backend.a" ]] ||
  fail "the CUDA backend library was not built"

echo "== nvidia-smi"
timeout 30 nvidia-smi || fail "nvidia-smi failed"
gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)

echo "== CUDA parity tests"
parity_rc=0
timeout "$(left)" "$BUILD_DIR/bin/backend_test" --gtest_filter='*Cuda*:BackendFactoryTest.*' \
  --gtest_color=no 2>&1 | tee "$LOG_DIR/parity.log" || parity_rc=1
# Models' training steps on the GPU: gradient checks and SGD (softmax
# regression, MLP, sparse logistic regression, matrix factorization).
for model_test in mlp_test sparse_logreg_test mf_test; do
  timeout "$(left)" "$BUILD_DIR/bin/$model_test" --gtest_filter='*Cuda*' \
    --gtest_color=no 2>&1 | tee -a "$LOG_DIR/parity.log" || parity_rc=1
done
passed=$(grep -c '^\[       OK \]' "$LOG_DIR/parity.log")
failed=$(grep -c '^\[  FAILED  \] .*(' "$LOG_DIR/parity.log")
skipped=$(grep -c '^\[  SKIPPED \] .*(' "$LOG_DIR/parity.log")
if ((skipped > 0)); then
  echo "gpu_check: $skipped test(s) skipped: the tests did not see the GPU" >&2
  parity_rc=1
fi

echo "== SGEMM throughput"
bench_rc=0
timeout "$(left)" "$BUILD_DIR/bin/gemm_bench" --sizes 1024 2048 4096 2>&1 |
  tee "$LOG_DIR/gemm.log" || bench_rc=1

echo
echo "== summary (logs in $LOG_DIR)"
printf '%-16s %s\n' "gpu" "$gpu_line"
printf '%-16s %s\n' "parity tests" \
  "$([[ $parity_rc == 0 ]] && echo PASS || echo FAIL): $passed passed, $failed failed, $skipped skipped"
printf '%-16s %s\n' "gemm_bench" "$([[ $bench_rc == 0 ]] && echo PASS || echo FAIL)"
sed -n '/^ *n /,$p' "$LOG_DIR/gemm.log"
printf '%-16s %ss of 300s\n' "elapsed" "$SECONDS"

((parity_rc == 0 && bench_rc == 0)) || fail "see the summary above"
echo "gpu_check: OK"
