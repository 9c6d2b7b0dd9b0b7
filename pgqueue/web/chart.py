"""The overview's throughput chart: an inline SVG drawn on the server (no script)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

__all__ = ["throughput_svg"]

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 12, 28


def _nice(top: int) -> int:
    """A round axis maximum at or above ``top``."""
    if top <= 5:
        return 5
    step = 10 ** (len(str(top)) - 1)
    for m in (1, 2, 2.5, 5, 10):
        if top <= m * step:
            return int(m * step)
    return top  # pragma: no cover


def throughput_svg(minutes: Sequence[tuple[datetime, int, int]]) -> str:
    """Per-minute bars of jobs that left the queue, and a line of jobs enqueued.

    >>> svg = throughput_svg([(datetime(2025, 1, 1, 12, m), 10 * m, 5 * m) for m in range(3)])
    >>> svg.startswith("<svg") and svg.count("<rect class=\\"bar\\"") == 3
    True
    """
    n = max(len(minutes), 1)
    top = _nice(max([max(ins, out) for _, ins, out in minutes] + [1]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / n

    def y(value: int) -> float:
        return TOP + plot_h - plot_h * value / top

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="jobs per minute, last {n} minutes" xmlns="http://www.w3.org/2000/svg">'
    ]
    for frac in (0, 0.5, 1):
        value = int(top * frac)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" '
            f'y2="{y(value):.1f}"/><text class="axis" x="{LEFT - 6}" y="{y(value) + 4:.1f}" '
            f'text-anchor="end">{value:,}</text>'
        )
    points = []
    for i, (minute, ins, out) in enumerate(minutes):
        x = LEFT + i * slot
        label = escape(f"{minute:%H:%M}: {out:,} left the queue, {ins:,} enqueued")
        parts.append(
            f'<rect class="bar" x="{x + slot * 0.1:.1f}" y="{y(out):.1f}" '
            f'width="{slot * 0.8:.1f}" height="{TOP + plot_h - y(out):.1f}">'
            f"<title>{label}</title></rect>"
        )
        points.append(f"{x + slot / 2:.1f},{y(ins):.1f}")
        if i % 15 == 0 or i == len(minutes) - 1:
            parts.append(
                f'<text class="axis" x="{x + slot / 2:.1f}" y="{HEIGHT - 8}" '
                f'text-anchor="middle">{minute:%H:%M}</text>'
            )
    if points:
        parts.append(f'<polyline class="line" points="{" ".join(points)}"/>')
    parts.append("</svg>")
    return "".join(parts)
