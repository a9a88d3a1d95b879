"""The probe client: a fixed sequence of completion requests whose
``cached_tokens`` show what the prefix cache served, in the style of the
KV-offload seed's forward-then-reverse probe.

Every prompt is made of vocabulary words (one word = one token, see
make_models.py) drawn from a seeded generator, so two runs send exactly the
same requests in the same order, one at a time. Generation is one greedy
token; the model's output never feeds a later prompt.

Phases (names appear in the receipt):

* ``forward``: K distinct prompts of N tokens;
* ``reverse``: the same K prompts, last first (each is now cached);
* ``shared``: K prompts sharing the first M tokens of prompt 0, new tails;
* ``growth``: a conversation that grows by a few dozen tokens per turn,
  each turn resending everything before it;
* ``long``: L distinct prompts of thousands of tokens (default 4 of
  7,000: 218 blocks of 32, where the stride search has blocks to skip);
* ``long_reverse``: the same L prompts, last first (each is now cached:
  the KV pool holds all of them).

``LONG_PHASES`` are sent last, so the earlier phases are the same requests
as before they existed; run_e2e.py reads the engine's counters between the
two parts, so the long phase's lookups are timed on their own.

Stdlib only (urllib), loopback only, every wait bounded.
"""

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

HOST = "127.0.0.1"
LONG_PHASES = ("long", "long_reverse")


@dataclass(frozen=True)
class Workload:
    prompts: int = 4  # K
    prompt_tokens: int = 1000  # N
    shared_tokens: int = 900  # M
    growth_turns: int = 6
    growth_step: int = 70
    long_prompts: int = 4  # L
    long_tokens: int = 7000
    vocab_words: int = 510
    seed: int = 1234


@dataclass
class Sample:
    phase: str
    index: int
    prompt_tokens: int
    cached_tokens: int | None
    latency_ms: float


def _words(rng: random.Random, count: int, vocab_words: int) -> list[str]:
    return [f"w{rng.randrange(vocab_words)}" for _ in range(count)]


def requests(work: Workload) -> Iterator[tuple[str, int, list[str]]]:
    """(phase, index, prompt words) in sending order."""
    rng = random.Random(work.seed)
    base = [_words(rng, work.prompt_tokens, work.vocab_words) for _ in range(work.prompts)]
    for i, prompt in enumerate(base):
        yield "forward", i, prompt
    for i in reversed(range(work.prompts)):
        yield "reverse", i, base[i]
    for i in range(work.prompts):
        tail = _words(rng, work.prompt_tokens - work.shared_tokens, work.vocab_words)
        yield "shared", i, base[0][: work.shared_tokens] + tail
    conversation = _words(rng, work.growth_step, work.vocab_words)
    for turn in range(work.growth_turns):
        yield "growth", turn, list(conversation)
        conversation += _words(rng, work.growth_step, work.vocab_words)
    # Its own generator, so the phases above are the same with or without it.
    long_rng = random.Random(work.seed + 1)
    long = [_words(long_rng, work.long_tokens, work.vocab_words)
            for _ in range(work.long_prompts)]
    for i, prompt in enumerate(long):
        yield "long", i, prompt
    for i in reversed(range(work.long_prompts)):
        yield "long_reverse", i, long[i]


def max_tokens(work: Workload) -> int:
    """The longest prompt the workload sends."""
    return max(work.prompt_tokens, work.growth_step * work.growth_turns,
               work.long_tokens if work.long_prompts else 0)


def _post(port: int, path: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{HOST}:{port}{path}", data=data,
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def complete(port: int, model: str, prompt: str | list[int], max_tokens: int,
             timeout_s: float, ignore_eos: bool = False) -> dict[str, Any]:
    """One greedy ``/v1/completions`` reply (``prompt``: text or token ids;
    ``ignore_eos``: exactly ``max_tokens`` tokens)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0.0, "seed": 0}
    if ignore_eos:
        body["ignore_eos"] = True
    return _post(port, "/v1/completions", body, timeout_s)


def get_text(port: int, path: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=timeout_s) as resp:
        return resp.read().decode()


def prefix_cache_counters(port: int) -> dict[str, float]:
    """The ``vllm:prefix_cache_*`` counters from ``/metrics`` (summed over
    label sets)."""
    counters: dict[str, float] = {}
    for line in get_text(port, "/metrics").splitlines():
        if line.startswith("vllm:prefix_cache_") and not line.startswith("#"):
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            if name.endswith("_created"):  # a timestamp, not a count
                continue
            counters[name] = counters.get(name, 0.0) + float(value)
    return counters


def run(port: int, model: str, work: Workload, timeout_s: float = 60.0,
        phases: tuple[str, ...] | None = None) -> list[Sample]:
    """Send the workload (only ``phases``, if given), one request at a
    time; return one sample each."""
    samples = []
    for phase, index, words in requests(work):
        if phases is not None and phase not in phases:
            continue
        start = time.perf_counter()
        reply = complete(port, model, " ".join(words), 1, timeout_s)
        latency_ms = (time.perf_counter() - start) * 1000
        usage = reply.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        samples.append(Sample(
            phase=phase, index=index, prompt_tokens=int(usage.get("prompt_tokens", -1)),
            cached_tokens=details.get("cached_tokens"), latency_ms=round(latency_ms, 3),
        ))
    return samples


def as_rows(samples: list[Sample]) -> list[dict[str, Any]]:
    return [asdict(s) for s in samples]
