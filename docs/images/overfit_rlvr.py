"""Draw the mean training reward of each step, one line a seed (or an arm's `label`), from a ladder's table, as the
README's SVG:
`python docs/images/overfit_rlvr.py runs/overfit/ladder.json docs/images/overfit-rlvr.svg`.
"""

import json
import sys
from pathlib import Path

WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 60, 150, 40, 50
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def curve_svg(runs: list[tuple[str, list[float]]], title: str) -> str:
    """An SVG line chart of each run's per-step reward (0 to 1 on the y axis, steps 1..n on the x axis)."""
    steps = max(len(rewards) for _, rewards in runs)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(step: int) -> float:
        return LEFT + (step - 1) / max(steps - 1, 1) * plot_w

    def y(reward: float) -> float:
        return TOP + (1 - reward) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for step in range(1, steps + 1):
        parts.append(f'<text x="{x(step):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{step}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">optimizer step</text>')
    parts.append(
        f'<text x="16" y="{TOP + plot_h / 2}" text-anchor="middle" transform="rotate(-90 16 {TOP + plot_h / 2})">'
        "mean training reward</text>"
    )
    for index, (label, rewards) in enumerate(runs):
        colour = COLOURS[index % len(COLOURS)]
        points = " ".join(f"{x(step):.1f},{y(reward):.1f}" for step, reward in enumerate(rewards, start=1))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for step, reward in enumerate(rewards, start=1):
            parts.append(f'<circle cx="{x(step):.1f}" cy="{y(reward):.1f}" r="3" fill="{colour}"/>')
        legend_y = TOP + 16 + 20 * index
        parts.append(
            f'<line x1="{LEFT + plot_w + 16}" x2="{LEFT + plot_w + 36}" y1="{legend_y - 4}" y2="{legend_y - 4}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{LEFT + plot_w + 42}" y="{legend_y}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(table_path: Path, svg_path: Path) -> None:
    table = json.loads(table_path.read_text())
    runs = [
        (arm.get("label") or f"seed {arm['seed']}", arm["train_rewards"])
        for arm in table["arms"]
        if arm.get("train_rewards")
    ]
    title = "Dr.GRPO on the demo tasks, from SmolLM2-135M fine-tuned on their demonstrations (CPU)"
    svg_path.write_text(curve_svg(runs, title))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
