"""Generators of the bundled math tasks (used by scripts/make_bundled_tasks.py).

Five levels, from what a 135M model can do to multi-step word problems:

1. one-step arithmetic ("What is 7 + 5?")
2. two-step arithmetic with precedence and parentheses
3. one-step word problems
4. two-step word problems, fractions and percentages
5. multi-step word problems and linear equations

Every generator returns ``(question, expression, kind)``: ``expression`` is Python arithmetic whose exact
value (with :class:`fractions.Fraction`) is the answer, so answers are computed, never typed, and the
tests recompute them independently.
"""

from __future__ import annotations

import ast
import operator
import random
from collections.abc import Callable
from fractions import Fraction

NAMES = ("Tom", "Sara", "Ali", "Mia", "Ken", "Lena", "Omar", "Ivy", "Raj", "Zoe", "Ben", "Nia")
ITEMS = ("apples", "pencils", "stickers", "marbles", "books", "cards", "shells", "coins")

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(expression: str) -> Fraction:
    """Exact value of an arithmetic expression of integers, + - * / and parentheses."""

    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"unsupported expression element {ast.dump(node)}")

    return ev(ast.parse(expression, mode="eval"))


def format_answer(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


# ---- level 1 ----------------------------------------------------------------------------------------------


def l1_add(r: random.Random):
    a, b = r.randint(1, 20), r.randint(1, 20)
    return f"What is {a} + {b}?", f"{a} + {b}", "add"


def l1_sub(r: random.Random):
    a = r.randint(5, 30)
    b = r.randint(1, a)
    return f"What is {a} - {b}?", f"{a} - {b}", "sub"


def l1_mul(r: random.Random):
    a, b = r.randint(2, 10), r.randint(2, 10)
    return f"What is {a} * {b}?", f"{a} * {b}", "mul"


def l1_div(r: random.Random):
    b, q = r.randint(2, 10), r.randint(2, 10)
    return f"What is {b * q} / {b}?", f"{b * q} / {b}", "div"


# ---- level 2 ----------------------------------------------------------------------------------------------


def l2_precedence(r: random.Random):
    a, b, c = r.randint(1, 20), r.randint(2, 9), r.randint(2, 9)
    return f"What is {a} + {b} * {c}?", f"{a} + {b} * {c}", "precedence"


def l2_parentheses(r: random.Random):
    a, b, c = r.randint(10, 30), r.randint(1, 9), r.randint(2, 6)
    return f"What is ({a} - {b}) * {c}?", f"({a} - {b}) * {c}", "parentheses"


def l2_chain(r: random.Random):
    a, b, c = r.randint(10, 50), r.randint(1, 20), r.randint(1, 20)
    return f"What is {a} + {b} - {c}?", f"{a} + {b} - {c}", "chain"


def l2_square(r: random.Random):
    a, b = r.randint(2, 12), r.randint(1, 20)
    return f"What is {a} squared plus {b}?", f"{a} * {a} + {b}", "square"


# ---- level 3 ----------------------------------------------------------------------------------------------


def l3_gain(r: random.Random):
    n, item, a, b = r.choice(NAMES), r.choice(ITEMS), r.randint(2, 30), r.randint(2, 30)
    return f"{n} has {a} {item} and gets {b} more. How many {item} does {n} have now?", f"{a} + {b}", "gain"


def l3_loss(r: random.Random):
    n, item = r.choice(NAMES), r.choice(ITEMS)
    a = r.randint(10, 40)
    b = r.randint(1, a - 1)
    return f"{n} had {a} {item} and gave {b} away. How many {item} are left?", f"{a} - {b}", "loss"


def l3_groups(r: random.Random):
    item, per, boxes = r.choice(ITEMS), r.randint(2, 12), r.randint(2, 9)
    return f"A box holds {per} {item}. How many {item} are in {boxes} boxes?", f"{per} * {boxes}", "groups"


def l3_share(r: random.Random):
    item, kids, each = r.choice(ITEMS), r.randint(2, 8), r.randint(2, 9)
    return (
        f"{kids * each} {item} are shared equally among {kids} children. How many {item} does each child get?",
        f"{kids * each} / {kids}",
        "share",
    )


# ---- level 4 ----------------------------------------------------------------------------------------------


def l4_percent_of(r: random.Random):
    p, base = r.choice((10, 20, 25, 50, 75)), r.choice((40, 60, 80, 120, 200, 360))
    return f"What is {p}% of {base}?", f"{p} * {base} / 100", "percent"


def l4_fraction_sum(r: random.Random):
    a, b = r.sample((2, 3, 4, 5, 6, 8), 2)
    return (
        f"What is 1/{a} + 1/{b}? Give the answer as a fraction in lowest terms.",
        f"1 / {a} + 1 / {b}",
        "fractions",
    )


def l4_shopping(r: random.Random):
    p, q, m, k = r.randint(2, 9), r.randint(2, 9), r.randint(2, 5), r.randint(1, 4)
    return (
        (
            f"A pen costs {p} dollars and a notebook costs {q} dollars. How many dollars do {m} pens and "
            f"{k} notebooks cost?"
        ),
        f"{m} * {p} + {k} * {q}",
        "shopping",
    )


def l4_speed(r: random.Random):
    v, h, extra = r.choice((40, 50, 60, 80)), r.randint(2, 5), r.randint(5, 30)
    return (
        (
            f"A car drives at {v} km per hour for {h} hours, then {extra} km more. How many km does it drive "
            "in total?"
        ),
        f"{v} * {h} + {extra}",
        "speed",
    )


# ---- level 5 ----------------------------------------------------------------------------------------------


def l5_equation(r: random.Random):
    a, x, b = r.randint(2, 9), r.randint(1, 12), r.randint(1, 20)
    return f"Solve for x: {a}x + {b} = {a * x + b}.", f"({a * x + b} - {b}) / {a}", "equation"


def l5_pencils(r: random.Random):
    n, packs, per, lost, more = (
        r.choice(NAMES),
        r.randint(2, 6),
        r.randint(3, 10),
        r.randint(1, 5),
        r.randint(1, 9),
    )
    return (
        (
            f"{n} buys {packs} packs of {per} pencils, loses {lost} pencils, then buys {more} more pencils. "
            f"How many pencils does {n} have?"
        ),
        f"{packs} * {per} - {lost} + {more}",
        "multi_step",
    )


def l5_discount(r: random.Random):
    price, p, coupon = r.choice((40, 60, 80, 100, 120)), r.choice((10, 20, 25, 50)), r.randint(2, 9)
    return (
        (
            f"A jacket costs {price} dollars. It is discounted by {p}%, and then a {coupon} dollar coupon is "
            "used. What is the final price in dollars?"
        ),
        f"{price} * (100 - {p}) / 100 - {coupon}",
        "discount",
    )


def l5_average(r: random.Random):
    values = [r.randint(50, 100) for _ in range(3)]
    values[2] += (-sum(values)) % 3  # make the mean an integer
    a, b, c = values
    return (
        f"Three test scores are {a}, {b} and {c}. What is their average?",
        f"({a} + {b} + {c}) / 3",
        "average",
    )


def l5_rectangle(r: random.Random):
    w, h, cut = r.randint(3, 15), r.randint(3, 15), r.randint(1, 2)
    return (
        (
            f"A rectangle is {w} cm wide and {h} cm tall. A square of side {cut} cm is cut from it. What area in "
            "square cm is left?"
        ),
        f"{w} * {h} - {cut} * {cut}",
        "area",
    )


LEVELS: dict[int, tuple[Callable[[random.Random], tuple[str, str, str]], ...]] = {
    1: (l1_add, l1_sub, l1_mul, l1_div),
    2: (l2_precedence, l2_parentheses, l2_chain, l2_square),
    3: (l3_gain, l3_loss, l3_groups, l3_share),
    4: (l4_percent_of, l4_fraction_sum, l4_shopping, l4_speed),
    5: (l5_equation, l5_pencils, l5_discount, l5_average, l5_rectangle),
}
