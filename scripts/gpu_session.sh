#!/usr/bin/env bash
# Run GPU work on a lent GPU machine and pack everything into $OUT/results.tar.gz (the tool returns
# few files). Usage, from the project root, after `. .whl/activate.sh`:
#   scripts/gpu_session.sh tests                 # pytest -m gpu
#   scripts/gpu_session.sh bench TOPIC...        # course-kit bench TOPIC (slug from the visible GPUs)
#   scripts/gpu_session.sh record NN...          # papermill the notebooks
# Several stages: scripts/gpu_session.sh tests -- bench roofline dtypes -- record 00 01
set -uo pipefail
OUT=${OUT:-$PWD/out}
RES=$OUT/results
mkdir -p "$RES"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
slug=$(python3 -c "from course_kit import reference; print(reference.gpu_slug())")
tag=${LANE:+-lane$LANE}
stage() {
  local what=$1; shift
  case $what in
    tests)  timeout "${TESTS_TIMEOUT:-900}" python3 -m pytest -m gpu tests -q -p no:cacheprovider --timeout=300 "$@" 2>&1 | tee -a "$RES/gpu-tests-$slug$tag.log" ;;
    bench)  for t in "$@"; do
              start=$(date +%s)
              timeout "${BENCH_TIMEOUT:-900}" python3 -m course_kit bench "$t" --out "$RES/$slug" 2>&1 | tee -a "$RES/bench-$slug$tag.log"
              echo "## $t took $(( $(date +%s) - start )) s" | tee -a "$RES/bench-$slug$tag.log"
            done ;;
    record) python3 -m course_kit record "$@" --timeout "${CELL_TIMEOUT:-600}" --out "$RES/$slug/notebooks" 2>&1 | tee -a "$RES/record-$slug$tag.log" ;;
    *) echo "unknown stage $what"; return 2 ;;
  esac
}
args=("$@"); cur=()
for a in "${args[@]}" --; do
  if [ "$a" = "--" ]; then [ ${#cur[@]} -gt 0 ] && stage "${cur[@]}"; cur=(); else cur+=("$a"); fi
done
[ -n "${NO_TAR:-}" ] || { tar -czf "$OUT/results.tar.gz" -C "$OUT" results && ls -la "$OUT"; }
