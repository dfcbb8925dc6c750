"""How many tasks each split of an env server holds, read through OpenEnv's Task API before a run relies on them."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from trainer_client.env.errors import EnvError


def split_sizes(url: str, timeout_s: float = 10.0) -> dict[str, int] | None:
    """{split: tasks} of the env server at `url` (http://, or ws:// which serves the same API); None for a gRPC
    server, whose protocol has no task listing."""
    parts = urlsplit(url)
    if parts.scheme == "grpc":
        return None
    base = f"{'https' if parts.scheme in ('https', 'wss') else 'http'}://{parts.netloc}"
    try:
        with httpx.Client(base_url=base, timeout=timeout_s) as http:
            [name] = http.get("/list_environments").raise_for_status().json()[:1]
            splits = [split["name"] for split in http.get(f"/{name}/splits").raise_for_status().json()]
            return {
                split: int(
                    http.post(f"/{name}/num_tasks", json={"split": split}).raise_for_status().json()["num_tasks"]
                )
                for split in splits
            }
    except (httpx.HTTPError, ValueError, KeyError) as error:
        raise EnvError(
            f"could not list the tasks of the env server at {url}: {error}; is `regrow serve` there?"
        ) from None


def require_split(url: str, split: str, at_least: int, purpose: str) -> None:
    """Raise ValueError, naming what there is, unless the env at `url` has `at_least` tasks in `split`."""
    sizes = split_sizes(url)
    if sizes is None:
        return
    if sizes.get(split, 0) < at_least:
        held = ", ".join(f"{name} ({count})" for name, count in sorted(sizes.items())) or "none"
        raise ValueError(
            f"{purpose} needs {at_least} task(s) in split {split!r} of {url}, which has {sizes.get(split, 0)}; its "
            f"splits: {held}. Pick one of those, or make the split with `regrow synth --split {split}` "
            "(or --split-by file) and serve that store"
        )
