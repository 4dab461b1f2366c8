"""Shared by tests/vllm/test_vllm_server.py and tests/sglang/test_sglang_server.py: run
benchmarks/serve_compare.py (the engine's real HTTP server, its own backend then ours, the seeded load of
benchmarks/load_servers.py) in this venv and check its report request by request."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVE_COMPARE = ROOT / "benchmarks" / "serve_compare.py"


def serve_compare(
    engine: str,
    model: str,
    out: Path,
    *,
    pressure: bool = False,
    reference: Path | None = None,
    env: dict | None = None,
    timeout: int = 900,
) -> dict:
    cmd = [sys.executable, str(SERVE_COMPARE), "--engine", engine, "--model", model, "--out", str(out)]
    if pressure:
        cmd.append("--pressure")
    if reference is not None:
        cmd += ["--reference", str(reference)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if not out.exists():
        raise AssertionError(
            f"serve_compare wrote no report (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}"
        )
    rep = json.loads(out.read_text())
    rep["_stdout"], rep["_rc"] = proc.stdout + proc.stderr[-3000:], proc.returncode
    return rep


def check_load(rep: dict, provider: str, min_concurrency: int = 64) -> None:
    """Both backends: every request completed or cancelled by the client, none errored or lost, >= 64 in
    flight at once, the server idle afterwards (cancelled streams released), a clean exit; ours served, through
    ``provider`` (the engine's CPU default: vLLM ``vllm_cpu``, SGLang ``torch_sdpa``)."""
    print(rep["_stdout"])
    reqs = rep["requests"]
    planned_cancel = {r["idx"] for r in reqs if r["cancel_after"]}
    assert len(reqs) >= 2 * min_concurrency and rep["load"]["concurrency"] >= min_concurrency
    assert sum(r["stream"] for r in reqs) and sum(not r["stream"] for r in reqs)
    assert sum(r["prefix_group"] >= 0 for r in reqs) >= 8 and sum(isinstance(r["prompt"], str) for r in reqs)
    for b in ("own", "ours"):
        s, srv, res = rep["backends"][b]["summary"], rep["backends"][b]["server"], rep["results"][b]
        assert s["errors"] == 0 and s["lost"] == 0, (b, s["error_samples"])
        assert s["peak_in_flight"] >= min_concurrency, (b, s["peak_in_flight"])
        assert s["completed"] + s["cancelled"] == len(reqs), (b, s)
        cancelled = {x["idx"] for x in res if x["status"] == "cancelled"}
        assert cancelled and cancelled <= planned_cancel, (b, cancelled, planned_cancel)
        for x in res:  # exact lengths; a cancelled stream got fewer tokens than asked
            want = reqs[x["idx"]]["max_tokens"]
            assert len(x["token_ids"]) == want if x["status"] == "ok" else len(x["token_ids"]) < want, x
        assert srv["idle_after_load"], (b, srv["metrics_after_load"])
        sd = srv["shutdown"]
        assert sd["clean"] and sd["rc"] == 0 and not sd.get("forced") and not sd["leftover_children"], (b, sd)
        assert srv["ours_served"] == (b == "ours"), (b, srv["plugin_lines"])
    assert any(f"'{provider}' serves" in ln for ln in rep["backends"]["ours"]["server"]["plugin_lines"])


def check_identical(rep: dict) -> None:
    """Every request completed by both backends: identical greedy token ids and text; cancelled ones on
    the tokens both received."""
    c = rep["comparison"]
    ok_both = sum(a["status"] == b["status"] == "ok" for a, b in zip(rep["results"]["own"], rep["results"]["ours"]))
    assert c["completed_by_both"] == ok_both > 0
    assert c["n_mismatches"] == 0 and c["identical"] == ok_both, c["mismatches"][:3]
    assert c["cancel_prefix_checked"] > 0
