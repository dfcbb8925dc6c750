"""The options of a `regrow bench` command that takes many, as one dataclass: each field is an option, its typer
declaration in its `Annotated` type and its default the field's, so that the benchmark is handed one object (and
can be called with one from Python) while the command line stays typer's."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast

import typer

from regrow.bench.report import AS_JSON

Options = TypeVar("Options")


def bench_command(options: type[Options], run: Callable[[Options, bool | None], None]) -> Callable[..., None]:
    """A typer command whose options are the fields of the dataclass `options`, plus --json/--table; it hands `run`
    the filled dataclass and the output choice. Its help is `run`'s docstring."""
    hints = typing.get_type_hints(options, include_extras=True)
    parameters = [
        inspect.Parameter(
            each.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[each.name], default=_default(each)
        )
        for each in dataclasses.fields(cast(Any, options))
    ]
    parameters.append(
        inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=bool | None, default=AS_JSON)
    )

    def command(**given: Any) -> None:
        as_json = given.pop("as_json")
        run(options(**given), as_json)

    command.__name__, command.__doc__ = run.__name__, run.__doc__
    cast(Any, command).__signature__ = inspect.Signature(parameters)  # what typer reads the options from
    return command


def _default(option: dataclasses.Field) -> Any:
    if option.default is not dataclasses.MISSING:
        return option.default
    if option.default_factory is not dataclasses.MISSING:
        return option.default_factory()
    return inspect.Parameter.empty  # a required option


@dataclass(frozen=True)
class RolloutBenchOptions:
    """What `regrow bench rollouts` plays: which env and policy, how many episodes, and how they are drawn."""

    env: Annotated[str, typer.Option("--env", help="Env server: http://host:port or grpc://host:port.")]
    model: Annotated[str, typer.Option("--model", help="'tiny', 'smollm2', or a model folder.")] = "tiny"
    workers: Annotated[int, typer.Option(min=1, help="Concurrent rollout workers.")] = 4
    episodes: Annotated[int, typer.Option(min=1, help="Episodes to play.")] = 16
    max_turns: Annotated[int, typer.Option(min=1, help="Turn limit per episode.")] = 4
    max_turn_tokens: Annotated[
        int, typer.Option(min=1, help="Tokens a turn may write (48 measures throughput; a real turn needs hundreds).")
    ] = 48
    temperature: Annotated[float, typer.Option(min=0.01, help="The policy's sampling temperature.")] = 1.0
    turn_cache: Annotated[
        bool, typer.Option(help="Continue each turn from the keys and values of the episode's last one (the default).")
    ] = True
    task_id: Annotated[
        list[str], typer.Option("--task-id", help="Tasks to play (repeat); default: sample by seed.")
    ] = field(default_factory=list)
    sampler: Annotated[
        list[str],
        typer.Option("--sampler", help="The env's task draw: uniform or frontier; repeat to compare, in that order."),
    ] = field(default_factory=lambda: ["uniform"])
    group_size: Annotated[
        int, typer.Option(min=1, help="Episodes of one task per group (the zero-variance share needs 2+).")
    ] = 1
    skill_policy: Annotated[
        Path | None,
        typer.Option(
            "--skill-policy",
            exists=True,
            file_okay=False,
            help="Play a stand-in policy of known skill on this task store's tasks (the server's), instead of --model.",
        ),
    ] = None
    seed: int = 0
    prefix_latency: Annotated[
        bool,
        typer.Option(
            help="Also time a prefix reset (the first step of a played episode) against a plain reset of its task."
        ),
    ] = False


@dataclass(frozen=True)
class TrainBenchOptions:
    """What `regrow bench train` steps: the model, the synthetic batch's shape, and how the step is spread."""

    model: Annotated[
        str, typer.Option("--model", help="'tiny' (random 2-layer Qwen2), 'smollm2', or a model folder.")
    ] = "tiny"
    steps: Annotated[
        int, typer.Option(min=1, help="Timed steps per configuration, alternating (after one warm-up each).")
    ] = 3
    rows: Annotated[int, typer.Option(min=2, help="Trajectories per batch (an even number: groups of 2).")] = 8
    turns: Annotated[
        int, typer.Option(min=2, help="Policy turns per trajectory (40 tokens each, 60-token env replies).")
    ] = 6
    hinted_share: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of turns that carry an SDPO hint.")] = 0.1
    pairs: Annotated[int, typer.Option(min=1, help="DPO pairs per batch.")] = 4
    dpo_context_grad: Annotated[
        bool, typer.Option(help="DPO through the pairs' contexts (exact), as `regrow train` defaults.")
    ] = True
    lora: Annotated[
        int,
        typer.Option(
            "--lora", "--lora-r", min=0, help="Train a LoRA adapter of this rank, as `regrow train --lora-r` (0: full)."
        ),
    ] = 0
    processes: Annotated[
        int,
        typer.Option("--processes", min=1, help="CPU processes (torchrun, gloo), each training its share of the rows."),
    ] = 1
    sharding: Annotated[
        Literal["none", "fsdp"],
        typer.Option(help="How the processes hold the weights: whole (DDP), or sharded by FSDP2 ('fsdp')."),
    ] = "none"


@dataclass(frozen=True)
class MemoryBenchOptions:
    """What `regrow bench memory` trains: the model, the shapes of its steps, and how many steps each."""

    model: Annotated[
        str, typer.Option("--model", help="'smollm2' (the demo policy, fp32), 'tiny', or a save_pretrained folder.")
    ] = "smollm2"
    shape: Annotated[
        list[str],
        typer.Option(
            "--shape",
            help="ROWSxTURNS of a step (40-token turns, 60-token env replies, after a 282-token prompt); repeat.",
        ),
    ] = field(default_factory=lambda: ["2x2", "4x12"])
    steps: Annotated[
        int, typer.Option(min=2, help="Optimizer steps a shape (from the second, AdamW's state is held throughout).")
    ] = 2


@dataclass(frozen=True)
class LoadBenchOptions:
    """What `regrow bench load` plays, against which server, and the gates its run must pass."""

    tasks: Annotated[Path, typer.Option("--tasks", exists=True, file_okay=False, help="Task store directory.")]
    episodes: Annotated[
        int, typer.Option("--episodes", min=1, max=64, help="Concurrent clients, each playing episodes.")
    ] = 4
    steps: Annotated[int, typer.Option("--steps", min=1, max=200, help="Steps per episode, the last a submit.")] = 20
    duration: Annotated[
        float, typer.Option("--duration", min=1, max=43200, help="Seconds to start new episodes for.")
    ] = 600.0
    url: Annotated[
        str | None,
        typer.Option(
            "--url", help="A running server on loopback (http://127.0.0.1:PORT); default: start `regrow serve`."
        ),
    ] = None
    slots: Annotated[
        int | None, typer.Option("--slots", min=1, help="Episode slots of the started server [default: --episodes].")
    ] = None
    warmup: Annotated[float, typer.Option("--warmup", min=0, help="Seconds before RSS growth is measured.")] = 300.0
    split: Annotated[
        str | None,
        typer.Option(
            "--split", help="Reset by seed from this split, as trainers sample (twins mixed in), not by task id."
        ),
    ] = None
    max_errors: Annotated[
        int | None, typer.Option("--max-errors", min=0, help="Exit 1 past this many errors (not CAPACITY).")
    ] = None
    max_rss_growth: Annotated[
        float | None,
        typer.Option(
            "--max-rss-growth", min=0, help="Exit 1 when server RSS grows more than this fraction after the warm-up."
        ),
    ] = None
