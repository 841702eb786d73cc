"""Plain data across the boundary of a process that runs model-written code.

What such a process reports (a call's return value, an assert test's candidate result) crosses as text
and is read back here as a literal of built-in types, never as an object: an object whose ``__eq__``
always says yes, or whose ``__repr__`` lies, cannot reach the code that decides a verdict. Used by the
host (:mod:`.code_runner`) and by the judge process of assert tests (:mod:`._code_harness`, started
with ``python -I -S``: standard library only).

Plain: ``None``, ``bool``, ``int``, ``float`` (``inf`` / ``nan`` included), ``complex``, ``str``,
``bytes`` and ``list`` / ``tuple`` / ``dict`` / ``set`` / ``frozenset`` of plain values, nested at most
:data:`MAX_DEPTH` deep. Exact types: a subclass (``class Yes(int)``) is not plain.
"""

import ast

MAX_DEPTH = 100
SCALARS = (type(None), bool, int, float, complex, str, bytes)
CONTAINERS = (list, tuple, dict, set, frozenset)
#: names ``repr`` writes for non-finite floats and complex numbers
SPECIAL = {"inf": float("inf"), "nan": float("nan"), "infj": complex(0, float("inf")),
           "nanj": complex(0, float("nan"))}  # fmt: skip


class NotPlain(ValueError):
    """The text is not a literal of plain data (the message says what was found)."""


def is_plain(value, depth=0):
    """Whether ``value`` is plain data (exact built-in types, at most MAX_DEPTH deep)."""
    kind = type(value)
    if kind in SCALARS:
        return True
    if kind not in CONTAINERS or depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return all(is_plain(v, depth + 1) for v in value)


def _number(node):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, complex):
        return node.value
    if isinstance(node, ast.Name) and node.id in SPECIAL:
        return SPECIAL[node.id]
    raise NotPlain(f"not a number: {type(node).__name__}")


def _value(node, depth):
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested more than {MAX_DEPTH} deep")
    if isinstance(node, ast.Constant):
        if type(node.value) in SCALARS:
            return node.value
        raise NotPlain(f"a {type(node.value).__name__} constant")
    if isinstance(node, ast.Name) and node.id in SPECIAL:
        return SPECIAL[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):  # complex: (1+2j), (-0-1j)
        left = _value(node.left, depth + 1)
        right = _number(node.right)
        if type(left) in (int, float) and type(right) is complex:
            return left + right if isinstance(node.op, ast.Add) else left - right
        raise NotPlain("arithmetic")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_value(e, depth + 1) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotPlain("a ** in a dict")
        return {_value(k, depth + 1): _value(v, depth + 1) for k, v in zip(node.keys, node.values)}
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("set", "frozenset")
        and not node.keywords
        and len(node.args) <= 1
    ):
        items = _value(node.args[0], depth + 1) if node.args else ()
        if type(items) not in (list, tuple, set):
            raise NotPlain(f"{node.func.id}() of a {type(items).__name__}")
        return set(items) if node.func.id == "set" else frozenset(items)
    raise NotPlain(f"a {type(node).__name__} expression")


def parse(text):
    """The plain value written by ``repr`` in ``text``; :class:`NotPlain` for anything else."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _value(tree.body, 0)
    except NotPlain:
        raise
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as e:
        raise NotPlain(f"{type(e).__name__}: {e}"[:200]) from None
