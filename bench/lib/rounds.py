"""Rounds: measurements taken in turns, in an order that alternates, and their medians.

This host is shared and its speed drifts by more than most goals allow between runs
taken seconds apart. Every ratio a benchmark reports is therefore taken within rounds
(``a b c``, then ``c b a``, ...) and reported as the median of the rounds' ratios, over
an odd count of rounds so that each median is one round's figure.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench.lib.children import say

#: What ``alternated_rounds`` counts per second for a run of this name (else requests).
_UNITS = {"pgbench": "TPS", "sync": "jobs/s"}


def alternated_rounds(
    kind: str, runs: dict[str, Any], rounds: int, *, connections: int = 16
) -> list[dict[str, Any]]:
    """Run every measurement of ``runs`` once per round, in an order that alternates
    (``a b c``, then ``c b a``, ...); return each round's figures by name.

    P1's ratios set figures taken seconds apart against each other, and this shared
    host's speed drifted by more than their goals between them: one run measured SQLite's
    replay at 0.87x its creation, the next at 1.24x, with nothing changed. Alternated,
    a drift falls on both sides of a ratio, and the median of the rounds' ratios is
    reported (``bench.lib.goals.ratios``).
    """
    names = list(runs)
    out: list[dict[str, Any]] = []
    for n in range(rounds):
        figures: dict[str, Any] = {}
        for name in names if n % 2 == 0 else names[::-1]:
            say(f"[{kind}] round {n + 1}/{rounds}: {name}, {connections} connection(s)")
            figures[name] = runs[name](n)
            rate = figures[name].get("rps", figures[name].get("tps"))
            p50 = f", p50 {figures[name]['p50_ms']} ms" if connections == 1 else ""
            say(f"  {rate} {_UNITS.get(name, 'req/s')}{p50}")
        out.append(figures)
    return out


def median_run(rounds: list[dict[str, Any]], name: str, key: str) -> dict[str, Any]:
    """Return the run of ``name`` with the median ``key`` (the lower middle of an even
    count), with every round's ``key`` beside it."""
    ranked = sorted((r[name] for r in rounds), key=lambda run: run[key])
    return {**ranked[(len(ranked) - 1) // 2], f"rounds_{key}": [r[name][key] for r in rounds]}


def median_ratio(
    rounds: list[dict[str, Any]], top: tuple[str, str], bottom: tuple[str, str]
) -> float:
    """Return the median over ``rounds`` of ``top`` / ``bottom`` (each a run name and key)."""
    values: list[float] = [r[top[0]][top[1]] / max(r[bottom[0]][bottom[1]], 0.1) for r in rounds]
    return round(statistics.median(values), 3)


def odd_count(text: str) -> int:
    """Parse ``--rounds``: a positive odd count, so that every median the report gives
    (of ratios, of differences, the median run) is one round's figure, not the mean of
    two middle rounds that the run reported beside it did not measure."""
    n = int(text)
    if n < 1 or n % 2 == 0:
        raise argparse.ArgumentTypeError(f"{n}: give an odd number of rounds (1, 3, 5, ...)")
    return n


def new_over_base(
    rounds: list[dict[str, dict[str, Any]]], figures: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Return, per figure, each side's median and the median of the rounds' ``new / base``."""
    out: dict[str, dict[str, Any]] = {}
    for figure in figures:
        if any(r["base"].get(figure) is None for r in rounds):
            continue  # SQLite has no backends
        base = [r["base"][figure] for r in rounds]
        new = [r["new"][figure] for r in rounds]
        per_round = [n / b if b else float("nan") for n, b in zip(new, base, strict=True)]
        out[figure] = {
            "base": round(statistics.median(base), 3),
            "new": round(statistics.median(new), 3),
            "new_over_base": round(statistics.median(per_round), 3),
            "rounds": [round(x, 3) for x in per_round],
        }
    return out


def figure_lines(figures: dict[str, dict[str, Any]], base: str, new: str) -> list[str]:
    """Return one line per figure of ``new_over_base``: both medians and the median ratio."""
    return [
        f"  {figure}: {base} {r['base']}, {new} {r['new']}, {new}/{base} {r['new_over_base']}x"
        f" (rounds {r['rounds']})"
        for figure, r in figures.items()
    ]
