"""The batch protocol both engine suites use: several engine runs in one process (tests/vllm/run_vllm.py,
tests/sglang/run_sglang.py), so the engine's import and set-up are paid once per process, not once per run.

The runner prints ``BATCH_BEGIN + out`` and ``BATCH_END + out`` around each run's log and writes each run's
JSON to ``out`` ({"error": traceback} when the run raised; the next run still runs). The test side splits the
process's log by those lines and hands each test its own run (``collect``)."""

from __future__ import annotations

import gc
import json
import os
import traceback
from pathlib import Path
from typing import Callable

BATCH_BEGIN = "=== vxa batch run begins: "
BATCH_END = "=== vxa batch run ends: "


def run_batch(jobs_json: str, run_one: Callable[[list[str]], None]) -> None:
    """Runner side: each job {"model", "out", "args"[, "env"]} of ``jobs_json`` in turn, as ``run_one([model, out,
    *args])`` with ``env`` set on top of this process's environment while it runs."""
    for job in json.load(open(jobs_json)):
        print(f"\n{BATCH_BEGIN}{job['out']}", flush=True)
        saved = dict(os.environ)
        os.environ.update(job.get("env", {}))
        try:
            run_one([job["model"], job["out"], *map(str, job["args"])])
        except Exception:  # noqa: BLE001  (recorded for its test; the next run still runs)
            json.dump({"error": traceback.format_exc()[-6000:]}, open(job["out"], "w"))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        gc.collect()
        print(f"\n{BATCH_END}{job['out']}", flush=True)


class Runs(dict):
    """{tag: result} of one batch process; a run that failed raises here, when its test asks for it."""

    def __init__(self, engine: str):
        super().__init__()
        self.engine = engine

    def __getitem__(self, tag: str) -> dict:
        res = super().__getitem__(tag)
        if "error" in res:
            raise AssertionError(
                f"{self.engine} run {tag!r} failed:\n{res['error']}\n--- its log ---\n{res['log'][-4000:]}"
            )
        return res


def collect(engine: str, outs: dict[str, Path], log: str, returncode: int) -> Runs:
    """Test side: each tag's JSON from ``outs`` with its part of the process's ``log`` under "log" and the whole
    log under "process_log" (messages logged once per process); a missing JSON is an error naming ``returncode``."""
    runs = Runs(engine)
    for tag, out in outs.items():
        part = log.partition(BATCH_BEGIN + str(out))[2].partition(BATCH_END + str(out))[0]
        res = (
            json.loads(out.read_text())
            if out.exists()
            else {"error": f"no result: the process ended with rc {returncode}"}
        )
        res.update(log=part, process_log=log)
        dict.__setitem__(runs, tag, res)
    return runs
