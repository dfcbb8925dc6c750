"""What the scan flags in a call: code run from text, computed imports, attribute surgery by name, exits, files
opened for writing. The walk (walker.py) reads each call's site and hands it here."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from env_server.grading.scan.literals import DECODERS, fold
from env_server.grading.scan.rules import HIDDEN_ATTRS, OPENERS, ROOTS, RUNNERS, WRITE_MODE


@dataclass(frozen=True)
class CallSite:
    """A call as the rules read it: what it calls (`callee` resolved, `bare` without `builtins.`, a method's name),
    its arguments (a bound `__setattr__`'s object first), and the module and attribute a getattr-like call names."""

    callee: str
    bare: str
    method: str
    args: list[ast.expr]
    module: str | None
    attr: str | None


def call_site(node: ast.Call, callee: str, resolve: Callable[[ast.AST], str | None]) -> CallSite:
    """The call's site, its names resolved by `resolve` (the walk's aliases)."""
    args, method = node.args, getattr(node.func, "attr", "")
    bare, attr = callee.removeprefix("builtins."), fold(args[1]) if len(args) > 1 else None
    module = resolve(args[0]) if args and bare in ("getattr", "setattr", "delattr", "vars") else None
    if method in ("__setattr__", "__delattr__") and isinstance(node.func, ast.Attribute):
        # type.__setattr__(Cls, name, value) and object.__setattr__(obj, ...) name their target first; a bound
        # Mod.__setattr__(name, value) is called on it
        unbound = isinstance(node.func.value, ast.Name) and node.func.value.id in ("type", "object")
        bare = method.strip("_")
        module = resolve(args[0]) if unbound and args else None if unbound else resolve(node.func.value)
        attr = fold(args[1]) if unbound and len(args) > 1 else None if unbound else fold(args[0]) if args else None
        if not unbound:
            args = [node.func.value, *args]
    return CallSite(callee, bare, method, args, module, attr)


def call_findings(
    node: ast.Call, site: CallSite, readable: bool, templated: bool, foreign: bool
) -> list[tuple[str, str]]:
    """(rule, detail) of each construct the call is: `readable` when the scan read the text it runs, `templated`
    when that text is a template exec'd into a namespace of its own, `foreign` when it names another module."""
    callee, bare, method, args, module, attr = site.callee, site.bare, site.method, site.args, site.module, site.attr
    decoder = _decoder(args) if bare in RUNNERS else None
    return [
        (rule, detail)
        for found, rule, detail in (
            (
                bare in ("exec", "eval", "compile") and not readable,
                "templated_code" if templated else "dynamic_code",
                f"calls {bare} on text the scan cannot read",
            ),
            (bare == "__import__" or callee == "importlib.__import__", "dynamic_import", "calls __import__"),
            (
                callee in ("importlib.import_module", "pkgutil.resolve_name")
                and args
                and fold(args[0]) is None
                and not relative_import(node),
                "dynamic_import",
                f"{callee} of a computed name",
            ),
            (bare in ("exit", "quit"), "process_exit", f"calls {bare}()"),
            (decoder, "decoded_code", f"{bare} runs text decoded by {decoder}"),
            (
                bare in ("getattr", "setattr", "delattr", "hasattr") and attr in HIDDEN_ATTRS,
                "obfuscated_name",
                f"{bare} of {attr!r}",
            ),
            (
                bare == "getattr" and len(args) > 1 and attr is None and (module or ".").split(".")[0] in ROOTS,
                "obfuscated_name",
                f"getattr of a computed name on {module}",
            ),
            (bare in ("setattr", "delattr", "vars") and foreign, "monkeypatch", f"{bare} on {module}"),
            (
                "setattr" in (bare, method.strip("_")) and attr in ("__class__", "__bases__"),
                "class_swap",
                f"setattr of {attr}",
            ),
            (
                callee in ("codecs.decode", "codecs.encode") and attr in ("rot13", "rot_13"),
                "obfuscated_name",
                "decodes rot13 text",
            ),
            (opens_for_writing(node, callee), "file_write", "opens a file for writing"),
            (method in ("write_text", "write_bytes"), "file_write", f"calls .{method}"),
        )
        if found
    ]


def _decoder(args: list[ast.expr]) -> str | None:
    """The decoding a runner's argument goes through (base64's, zlib's, .decode()), if any."""
    return next(
        (
            cast(ast.Attribute, sub.func).attr
            for arg in args
            for sub in ast.walk(arg)
            if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") in {*DECODERS, "decode", "decompress"}
        ),
        None,
    )


def opens_for_writing(node: ast.Call, callee: str) -> bool:
    """True for open(...) in a writing or computed mode, and for Path(...).open('w')."""
    method = callee not in OPENERS and getattr(node.func, "attr", "") == "open"
    position = 0 if method else 1 if callee in OPENERS else len(node.args)
    mode = next((keyword.value for keyword in node.keywords if keyword.arg == "mode"), None)
    mode = mode or (node.args[position] if position < len(node.args) else None)
    if isinstance(mode, ast.Constant):
        return isinstance(mode.value, str) and bool(WRITE_MODE.fullmatch(mode.value))
    return mode is not None and not method  # a method's first argument may be a file name, not a mode


def relative_import(node: ast.Call) -> bool:
    """import_module of a name inside the caller's own package: `(f".{name}", __package__)`, or a name in
    `__name__`'s package, as plugin registries and lazy submodules do."""
    package = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "package"), None)
    if isinstance(package, ast.Name) and package.id in ("__package__", "__name__"):
        return True
    first = node.args[0]
    pieces = first.values if isinstance(first, ast.JoinedStr) else [first.left] if isinstance(first, ast.BinOp) else []
    head = pieces[0] if pieces else None
    return isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith(".")
