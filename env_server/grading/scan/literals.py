"""What an expression of literals evaluates to, found without running it: the text a submission hides in pieces."""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import operator
from typing import Any, cast

DECODERS = {
    name: getattr(base64, name)
    for name in "b64decode urlsafe_b64decode b32decode b16decode b85decode a85decode decodebytes".split()
} | {"unhexlify": binascii.unhexlify, "fromhex": bytes.fromhex}
MAX_DEPTH, _MAX_TEXT = 100, 4096  # how deep an expression, and how long a text, the folding follows

_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def truth(node: ast.AST) -> bool | None:
    """Whether an expression is true whatever its inputs (`not False`, `1`, `x or True`, `len('') == 0`,
    `isinstance(x, object)`), False when always false, None when it depends on them."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = truth(node.operand)
        return None if inner is None else not inner
    if isinstance(node, ast.BoolOp):
        values = [truth(value) for value in node.values]
        decisive = isinstance(node.op, ast.Or)  # one true value decides an `or`, one false value an `and`
        return decisive if decisive in values else None if None in values else not decisive
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
        return True if getattr(node.args[1], "id", "") == "object" else None
    try:
        return bool(_constant(node))
    except ValueError:
        return None


def _constant(node: ast.AST) -> Any:
    """The value of an expression of literals, len() of one and comparisons of them; ValueError for anything else
    (nothing is evaluated that could take long)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "len" and len(node.args) == 1:
        value = _constant(node.args[0])
        if isinstance(value, (str, bytes, tuple)):
            return len(value)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        values = [_constant(node.left), *map(_constant, node.comparators)]
        try:
            return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:]))
        except TypeError as error:
            raise ValueError("not comparable") from error
    raise ValueError("not a constant")


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and (value := _int(node.operand)) is not None:
        return -value
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def fold(node: ast.AST, depth: int = 0) -> str | None:
    """The string an expression of literals evaluates to ('o' + 's', 'x'[::-1], b64decode('...')), else None."""
    text, depth = None, depth + 1
    if depth > MAX_DEPTH:
        return None
    if isinstance(node, ast.Constant):
        text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = fold(node.left, depth)
        right = None if left is None else fold(node.right, depth)
        text = None if left is None or right is None else left + right
    elif isinstance(node, ast.JoinedStr):
        parts = [fold(part.value if isinstance(part, ast.FormattedValue) else part, depth) for part in node.values]
        text = None if None in parts else "".join(cast(list[str], parts))
    elif isinstance(node, ast.Subscript) and (text := fold(node.value, depth)) is not None:
        index = node.slice
        bounds = (index.lower, index.upper, index.step) if isinstance(index, ast.Slice) else (index, None, None)
        numbers = [None if bound is None else _int(bound) for bound in bounds]
        if any(number is None and bound is not None for bound, number in zip(bounds, numbers)) or numbers[2] == 0:
            text = None
        else:
            text = text[slice(*numbers)] if isinstance(index, ast.Slice) else text[numbers[0] :][:1] or None
    elif isinstance(node, ast.Call):
        text = _fold_call(node.func, node.args, depth)
    return text if isinstance(text, str) and len(text) <= _MAX_TEXT else None


def _fold_call(func: ast.AST, args: list[ast.expr], depth: int) -> str | None:
    if isinstance(func, ast.Name) and func.id == "chr" and len(args) == 1:
        code = _int(args[0])
        return chr(code) if code is not None and 0 <= code < 0x110000 else None
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr == "join" and len(args) == 1:
        items = args[0]
        if isinstance(items, ast.Call) and getattr(items.func, "id", "") == "map" and len(items.args) == 2:
            pieces = getattr(items.args[1], "elts", [])  # map(chr, [95, 112, ...])
            items = ast.List([ast.Call(items.args[0], [piece], []) for piece in pieces])
        parts = [fold(item, depth) for item in items.elts] if isinstance(items, (ast.List, ast.Tuple)) else [None]
        separator = fold(func.value, depth)
        return None if separator is None or None in parts else separator.join(cast(list[str], parts))
    if func.attr not in DECODERS and func.attr not in ("decode", "encode"):
        return None
    base = fold(func.value, depth)
    if base is None and args:  # a module's function: base64.b64decode('...'), codecs.decode('...', 'rot13')
        base, args = fold(args[0], depth), args[1:]
    if base is None or func.attr in ("decode", "encode"):
        return codecs.decode(base, "rot13") if base and args and fold(args[-1], depth) in ("rot13", "rot_13") else base
    try:  # text in, text out: latin-1 maps bytes to the first 256 code points one to one
        return DECODERS[func.attr](base if func.attr == "fromhex" else base.encode("latin-1")).decode("latin-1")
    except (ValueError, UnicodeError):
        return None
