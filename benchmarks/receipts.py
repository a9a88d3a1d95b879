"""Receipts kept compact: the summary as JSON, the raw series compressed.

A benchmark's receipt holds its figures (medians, ratios, targets, the
replay's counters) and the raw series they were made from (every timed
sample, a step-time CDF, every reply of an end-to-end run). The figures are
what README and docs cite and what a reader diffs; the series are what a
re-analysis needs. So ``write`` splits them:

* ``<name>.json``: the receipt with each raw series replaced by a reference
  ``{"series": "<name>.series.json.gz", "at": "<JSON pointer>", "n": len}``,
  laid out to read top down (``dumps``);
* ``<name>.series.json.gz``: ``{pointer: series}`` for every series, gzip'd.

``load`` puts the series back, so a reader sees the receipt as it was
measured. A raw series is a value under one of ``SERIES_KEYS`` that is a list
of more than ``SERIES_MIN`` items, or an object holding such lists.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

WIDTH = 100
SERIES_MIN = 16
# The keys under which receipts keep raw series (timed samples, CDFs,
# per-request or per-reply records).
SERIES_KEYS = frozenset({
    "samples_ns", "samples_us", "samples_ms", "cdf_ms", "hit_tokens", "replies", "rows",
    "compared_rows", "rounds",
})
SIDECAR_SUFFIX = ".series.json.gz"


def sidecar_of(path: Path) -> Path:
    """``x.json`` -> ``x.series.json.gz``."""
    return path.with_name(path.name.removesuffix(".json") + SIDECAR_SUFFIX)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _is_series(value: Any) -> bool:
    """A list longer than ``SERIES_MIN``, or an object holding such lists
    (one series per implementation)."""
    if isinstance(value, list):
        return len(value) > SERIES_MIN
    return isinstance(value, dict) and any(isinstance(v, list) and len(v) > SERIES_MIN
                                           for v in value.values())


def _is_reference(value: Any) -> bool:
    """What ``split`` leaves in a summary in place of a series."""
    return isinstance(value, dict) and set(value) == {"series", "at", "n"}


def split(data: Any, sidecar_name: str) -> tuple[Any, dict[str, Any]]:
    """The receipt without its raw series (each replaced by a reference),
    and the series by JSON pointer."""
    series: dict[str, Any] = {}

    def walk(node: Any, pointer: str) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                at = f"{pointer}/{_escape(str(key))}"
                if key in SERIES_KEYS and _is_reference(value):
                    raise ValueError(f"receipt {at}: a reference to {value['series']}, not the "
                                     "series: read receipts with receipts.load")
                if key in SERIES_KEYS and _is_series(value):
                    series[at] = value
                    out[key] = {"series": sidecar_name, "at": at, "n": len(value)}
                else:
                    out[key] = walk(value, at)
            return out
        if isinstance(node, list):
            return [walk(value, f"{pointer}/{i}") for i, value in enumerate(node)]
        return node

    return walk(data, ""), series


def join(summary: Any, series: dict[str, Any]) -> Any:
    """The receipt with its series put back (``split``'s inverse)."""
    for pointer, value in series.items():
        parts = [_unescape(p) for p in pointer.split("/")[1:]]
        node = summary
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return summary


# A record (an object in a list: a cell, a row, a run) nested at most this
# deep goes on one line.
RECORD_DEPTH = 3


def _depth(node: Any) -> int:
    """0 for a scalar, 1 for an object or list of scalars, and so on."""
    if isinstance(node, dict):
        return 1 + max((_depth(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((_depth(v) for v in node), default=0)
    return 0


def dumps(node: Any, indent: int = 0, record: bool = False) -> str:
    """JSON that reads top down: one line per key of the outer objects, and
    on one line each object or list of scalars, each list of such lists,
    each record (``record``: an object in a list) at most ``RECORD_DEPTH``
    deep, and whatever else fits in ``WIDTH``."""
    one = json.dumps(node, ensure_ascii=False, default=float)
    depth = _depth(node)
    if (depth <= 1 or len(one) + indent <= WIDTH
            or (isinstance(node, list) and depth == 2 and all(isinstance(v, list) for v in node))
            or (record and isinstance(node, dict) and depth <= RECORD_DEPTH)):
        return one
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(node, dict):
        body = ",\n".join(f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {dumps(v, indent + 1)}"
                          for k, v in node.items())
        return "{\n" + body + "\n" + pad + "}"
    body = ",\n".join(inner + dumps(v, indent + 1, record=True) for v in node)
    return "[\n" + body + "\n" + pad + "]"


def write(path: Path, data: Any) -> Path:
    """Write the receipt ``data`` at ``path`` (and its series beside it, if
    it has any); returns ``path``."""
    path = Path(path)
    # Through JSON first, so that what is split is what a reader will load.
    data = json.loads(json.dumps(data, default=str))
    sidecar = sidecar_of(path)
    summary, series = split(data, sidecar.name)
    if series:
        with gzip.open(sidecar, "wt", encoding="utf-8", compresslevel=9) as f:
            json.dump(series, f, separators=(",", ":"))
    elif sidecar.exists():
        sidecar.unlink()
    path.write_text(dumps(summary) + "\n")
    return path


def load(path: Path) -> Any:
    """The receipt at ``path``, its series put back when its sidecar is there."""
    path = Path(path)
    summary = json.loads(path.read_text())
    sidecar = sidecar_of(path)
    if not sidecar.exists():
        return summary
    with gzip.open(sidecar, "rt", encoding="utf-8") as f:
        return join(summary, json.load(f))
