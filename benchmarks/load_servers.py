"""Bounded load on an OpenAI-compatible completions server (vLLM's or SGLang's), with the `openai` client.

    python benchmarks/load_servers.py --base-url http://127.0.0.1:PORT/v1 --model NAME --out load.json
        [--num-requests 96] [--concurrency 64] [--seed 0] [--vocab-size 258] [--deadline-s 300]

What it sends (all seeded, so two runs against two servers send exactly the same requests):
- `--num-requests` completions, at most `--concurrency` in flight (all of them start at once when the
  two are equal); random prompt lengths (4..`--max-prompt`) and output lengths (1..`--max-output`);
- shared prefixes: about 40 % of the requests start with one of 3 long common prefixes (64..128 tokens);
- prompts as token ids (most) or as text (a quarter: words of the tiny model's corpus);
- streaming and non-streaming, about half each;
- a few streams (`--cancel`, default 6) closed by the client after k = 1..3 chunks (cancelled mid-stream);
- temperature 0, `min_tokens = max_tokens` (the EOS logit masked until then: every completed request has
  exactly max_tokens tokens), plus `ignore_eos` on about half of them, `return_token_ids` (vLLM 0.32 and
  SGLang 0.5.23 accept all three in the body). The half without `ignore_eos` matters under memory pressure:
  SGLang reserves a request's whole max_tokens at admission when `ignore_eos` is set (it never retracts
  those) but only an estimated fraction otherwise.

What it records: for every request its status (ok / cancelled / error / lost), the generated token ids
and text (for cancelled ones: what arrived before the close), latency and time to first chunk. It
reports requests/s (completed requests over the wall time of the whole load), p50/p99 latency of the
completed requests, errors (exceptions, wrong lengths) and lost requests (not finished when the overall
deadline passed). It stops by itself: every request has a client timeout and the load an overall deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field

WORDS = ("the quick brown fox jumps over the lazy dog. a paged attention kernel reads keys and values from pages "
         "of a cache. intel gpus run vllm and sglang with this backend. sliding windows, sinks, softcap and alibi "
         "change which keys a query sees. once upon a time there was a small model that generated text one "
         "token at a time, attending to everything it had said before.").split()


@dataclass
class Req:
    idx: int
    prompt: list | str          # token ids or text
    max_tokens: int
    stream: bool
    cancel_after: int = 0       # > 0: close the stream after this many chunks
    prefix_group: int = -1      # which shared prefix (-1: none)
    ignore_eos: bool = True     # False: only min_tokens keeps the length exact (the EOS logit is masked)


@dataclass
class Result:
    idx: int
    status: str = "lost"        # ok | cancelled | error | lost
    token_ids: list = field(default_factory=list)
    text: str = ""
    chunks: int = 0
    latency_s: float = 0.0
    ttft_s: float | None = None
    finish_reason: str | None = None
    error: str | None = None


def build_requests(n: int, *, seed: int = 0, vocab_size: int = 258, max_prompt: int = 160, max_output: int = 40,
                   n_cancel: int = 6, n_prefixes: int = 3, prefix_share: float = 0.4,
                   text_share: float = 0.25) -> list[Req]:
    """The seeded request set. Token ids are drawn from [2, vocab_size): the byte-level alphabet of the
    tiny model's tokenizer (ids 2..257) is always there, whatever else its BPE learnt."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(2, vocab_size) for _ in range(rng.randint(64, 128))] for _ in range(n_prefixes)]
    cancel = set(rng.sample(range(n), min(n_cancel, n)))
    reqs = []
    for i in range(n):
        max_tokens = rng.randint(1, max_output)
        stream = rng.random() < 0.5
        group = -1
        if i in cancel:
            stream, max_tokens = True, max(max_tokens, 24)  # long enough to be closed mid-stream
        if rng.random() < text_share and i not in cancel:
            prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, max_prompt // 3)))
        elif rng.random() < prefix_share:
            group = rng.randrange(n_prefixes)
            prompt = prefixes[group] + [rng.randrange(2, vocab_size) for _ in range(rng.randint(1, 32))]
        else:
            prompt = [rng.randrange(2, vocab_size) for _ in range(rng.randint(4, max_prompt))]
        reqs.append(Req(i, prompt, max_tokens, stream, rng.randint(1, 3) if i in cancel else 0, group,
                        ignore_eos=rng.random() < 0.5))
    return reqs


def _token_ids(choice) -> list:
    ids = getattr(choice, "token_ids", None)
    if ids is None and getattr(choice, "model_extra", None):
        ids = choice.model_extra.get("token_ids")
    return list(ids or [])


async def _one(client, model: str, r: Req, res: Result, timeout_s: float):
    body = dict(model=model, prompt=r.prompt, max_tokens=r.max_tokens, temperature=0.0, timeout=timeout_s,
                extra_body={"ignore_eos": r.ignore_eos, "min_tokens": r.max_tokens, "return_token_ids": True})
    t0 = time.perf_counter()
    try:
        if not r.stream:
            out = await client.completions.create(**body)
            c = out.choices[0]
            res.token_ids, res.text, res.finish_reason = _token_ids(c), c.text, c.finish_reason
            res.ttft_s = res.latency_s = time.perf_counter() - t0
            res.chunks = 1
            if out.usage is not None and out.usage.completion_tokens != r.max_tokens:
                raise AssertionError(f"usage.completion_tokens {out.usage.completion_tokens} != {r.max_tokens}")
        else:
            stream = await client.completions.create(stream=True, **body)
            try:
                async for chunk in stream:
                    if not chunk.choices:
                        continue
                    c = chunk.choices[0]
                    if res.ttft_s is None:
                        res.ttft_s = time.perf_counter() - t0
                    res.chunks += 1
                    res.token_ids += _token_ids(c)
                    res.text += c.text or ""
                    res.finish_reason = c.finish_reason or res.finish_reason
                    if r.cancel_after and res.chunks >= r.cancel_after:
                        break
            finally:
                await stream.close()
            res.latency_s = time.perf_counter() - t0
            if r.cancel_after and res.finish_reason is None:
                res.status = "cancelled"
                return
        if len(res.token_ids) != r.max_tokens:
            raise AssertionError(f"{len(res.token_ids)} tokens, asked for exactly {r.max_tokens}")
        res.status = "ok"
    except asyncio.CancelledError:  # the overall deadline: stays "lost"
        res.latency_s = time.perf_counter() - t0
        raise
    except Exception as e:  # noqa: BLE001  (every failure is recorded, none stops the load)
        res.status, res.error = "error", _describe(e)[:500]
        res.latency_s = time.perf_counter() - t0


def _describe(e: BaseException) -> str:
    """The exception and its causes, outermost first: a connection error's socket-level reason (say
    `ConnectionResetError: [Errno 104]` under httpx's bare `ReadError`) is only in the chain."""
    parts, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {e}".rstrip(": "))
        e = e.__cause__ or e.__context__
    return " <- ".join(parts)


def _pct(xs: list, q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))]


async def run_load(base_url: str, model: str, reqs: list[Req], *, concurrency: int = 64,
                   request_timeout_s: float = 120.0, deadline_s: float = 300.0) -> dict:
    import httpx
    from openai import AsyncOpenAI

    # A new connection for every request, closed after it (no keep-alive): a reused connection can fail a request
    # with a connection error that says nothing about the server under test. Seen on a loaded CI host as httpx
    # `ReadError` with an empty message: the server closed an idle keep-alive connection just as the next request
    # went out on it (uvicorn's 5 s timeout), or httpcore's pool closed an expired idle connection it had already
    # handed to a waiting request (encode/httpcore#1110). A pool without keep-alive closes each connection when
    # its response ends and never hands one out twice; the servers still see `concurrency` requests at once.
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=0)
    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0,
                         http_client=httpx.AsyncClient(limits=limits, timeout=request_timeout_s))

    sem = asyncio.Semaphore(concurrency)
    results = [Result(r.idx) for r in reqs]
    peak = 0
    inflight = 0

    async def guarded(r: Req):
        nonlocal peak, inflight
        async with sem:
            inflight += 1
            peak = max(peak, inflight)
            try:
                await _one(client, model, r, results[r.idx], request_timeout_s)
            finally:
                inflight -= 1

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(guarded(r)) for r in reqs]
    done, pending = await asyncio.wait(tasks, timeout=deadline_s)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - t0
    await client.close()

    ok = [x for x in results if x.status == "ok"]
    lat = [x.latency_s for x in ok]
    summary = {
        "requests": len(reqs), "concurrency": concurrency, "peak_in_flight": peak, "wall_s": round(wall, 3),
        "completed": len(ok), "cancelled": sum(x.status == "cancelled" for x in results),
        "cancel_planned": sum(1 for r in reqs if r.cancel_after),
        "errors": sum(x.status == "error" for x in results), "lost": sum(x.status == "lost" for x in results),
        "streamed": sum(r.stream for r in reqs), "text_prompts": sum(isinstance(r.prompt, str) for r in reqs),
        "shared_prefix": sum(r.prefix_group >= 0 for r in reqs),
        "generated_tokens": sum(len(x.token_ids) for x in ok),
        "requests_per_s": round(len(ok) / wall, 3) if wall else None,
        "output_tokens_per_s": round(sum(len(x.token_ids) for x in ok) / wall, 2) if wall else None,
        "latency_p50_s": _pct(lat, 50), "latency_p99_s": _pct(lat, 99),
        "ttft_p50_s": _pct([x.ttft_s for x in ok if x.ttft_s is not None], 50),
        "ttft_p99_s": _pct([x.ttft_s for x in ok if x.ttft_s is not None], 99),
        "error_samples": [x.error for x in results if x.status == "error"][:5],
    }
    return {"summary": summary, "requests": [asdict(r) for r in reqs], "results": [asdict(x) for x in results]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", required=True, help="the served model name (the path given to the server)")
    ap.add_argument("--out", default=None, help="write the full record (requests, results, summary) here")
    ap.add_argument("--num-requests", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=258)
    ap.add_argument("--max-prompt", type=int, default=160)
    ap.add_argument("--max-output", type=int, default=40)
    ap.add_argument("--cancel", type=int, default=6)
    ap.add_argument("--request-timeout-s", type=float, default=120.0)
    ap.add_argument("--deadline-s", type=float, default=300.0)
    a = ap.parse_args()
    reqs = build_requests(a.num_requests, seed=a.seed, vocab_size=a.vocab_size, max_prompt=a.max_prompt,
                          max_output=a.max_output, n_cancel=a.cancel)
    rec = asyncio.run(run_load(a.base_url, a.model, reqs, concurrency=a.concurrency,
                               request_timeout_s=a.request_timeout_s, deadline_s=a.deadline_s))
    print(json.dumps(rec["summary"], indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rec, f)
    s = rec["summary"]
    raise SystemExit(1 if s["errors"] or s["lost"] else 0)


if __name__ == "__main__":
    main()
