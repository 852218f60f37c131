"""Small timing helpers shared by the bench scripts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def summary(name: str, samples_s: Sequence[float]) -> tuple[float, float]:
    """Print one line `name  median  p99` in milliseconds; return (median, p99) in ms."""
    median = statistics.median(samples_s) * 1000
    p99 = percentile(samples_s, 99) * 1000
    print(f"  {name:<34} n={len(samples_s):>5}  median {median:7.3f} ms   p99 {p99:7.3f} ms")
    return median, p99


def ratio(name: str, ours: float, baseline: float, target: float | None = None) -> None:
    """Print ours/baseline and whether it meets `target`."""
    value = ours / baseline if baseline else float("inf")
    verdict = "" if target is None else f"  (target <= {target:.2f}x: {'met' if value <= target else 'MISSED'})"
    print(f"  {name:<34} {value:5.2f}x{verdict}")
