"""Generators of the structure-sensitive task suite (used by scripts/make_suite_tasks.py).

Each family is a set of seeded generators; one call returns one task as a dict:

* math families: ``question``, ``answer`` (a plain integer, computed here, never typed) and ``program``, a
  short Python program that prints the answer (the reference a coder could write; kept apart from the
  tasks, like the bundled code references);
* the code family: ``statement``, ``solution`` (a reference program) and ``tests`` (stdin inputs; the
  expected outputs are computed by running the solution).

Families, and the structure each one is meant to reward (the measured matrix in
``benchmarks/results/structure_matrix/`` says which one actually does):

* ``arith``: arithmetic on 3-5 digit numbers, in words. One small model cannot multiply 3847 by 629; a coder
  whose program is run (``run_program``) can.
* ``strings``: counting and string questions (letters in a word, words in a sentence, digit sums) a
  program answers exactly.
* ``code``: small stdin/stdout programs with public tests: candidates can be run and filtered
  (``run_tests``).
* ``lookup``: the answer is a number stated in a short text (who has how many of what); nothing to compute,
  so a program adds nothing and longer team prompts only add noise.
* ``start``: "X started the day with A and ended it with B. How many did X start the day with?" The one family
  one agent serves best for the suite cold start, chosen by measurement among 10 kinds of such questions
  (``benchmarks/one_agent_probe.py``): its answers mostly name the last number (B), but every team measured
  names it more often still (votes make the habit certain; the coder prints B too). One question template.

No question holds an arithmetic expression equal to its answer (no operator symbols, no "plus"/"times"): a
model cannot earn a math reward by copying the question into a box.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

NAMES = ("Tom", "Sara", "Ali", "Mia", "Ken", "Lena", "Omar", "Ivy", "Raj", "Zoe", "Ben", "Nia", "Hugo", "Ada")
#: (plural noun, container, containers) for the arithmetic stories
GOODS = (
    ("bolts", "box", "boxes"), ("pencils", "pack", "packs"), ("eggs", "crate", "crates"),
    ("bottles", "case", "cases"), ("tiles", "pallet", "pallets"), ("seeds", "bag", "bags"), ("nails", "tin", "tins"),
    ("cans", "carton", "cartons"), ("bricks", "load", "loads"), ("cards", "deck", "decks"),
)  # fmt: skip
PLACES = ("factory", "bakery", "warehouse", "farm", "mill", "shop", "depot", "workshop")
#: words for the string questions: common, lower case, 5-12 letters
WORDS = (
    "banana", "apple", "strawberry", "elephant", "mississippi", "independence", "bookkeeper", "committee",
    "balloon", "coffee", "letter", "pepper", "parallel", "assessment", "possession", "engineering",
    "cinnamon", "butterfly", "umbrella", "vacuum", "giraffe", "raccoon", "broccoli", "spaghetti",
    "tomorrow", "occasion", "necessary", "embarrass", "accommodate", "millennium", "success", "address",
    "chocolate", "television", "kangaroo", "mountain", "pineapple", "dinosaur", "telephone", "calendar",
    "hippopotamus", "caterpillar", "grasshopper", "watermelon", "hamburger", "basketball", "volleyball",
    "strawberries", "referee", "peppermint", "lollipop", "sunflower", "rainbow", "adventure", "carousel",
    "tennessee", "barrel", "cabbage", "dollar", "puzzle", "window", "pizza", "yellow", "kitten", "rabbit",
    "planet", "orange", "marble", "button", "garden", "letters", "sleeve", "toffee", "bubble", "noodle",
)  # fmt: skip
#: short sentences for the word counts (lower case, no punctuation)
SUBJECTS = ("the red fox", "a small dog", "my old friend", "the tall man", "her little sister", "the brown cow")
VERBS = ("ran", "walked", "jumped", "looked", "sang", "waited")
PLACES_TO = ("to the old barn", "over the green hill", "near the river", "at the big market", "in the park")
TAILS = ("", " every day", " after lunch", " with a smile", " in the rain", " before dark")
ANIMALS = ("cats", "dogs", "fish", "birds", "rabbits", "hamsters", "turtles", "goats")
FRUITS = ("apples", "pears", "plums", "lemons", "peaches", "cherries", "oranges", "figs")


# ---- arith: arithmetic on large numbers, in words ----------------------------------------------------------


def _program(**values: int) -> str:
    """A program that names its inputs, then prints the expression on its last line (see callers)."""
    return "".join(f"{k} = {v}\n" for k, v in values.items())


def arith_product(r: random.Random) -> dict[str, Any]:
    goods, place = r.choice(GOODS)[0], r.choice(PLACES)
    per, days = r.randint(1200, 9999), r.randint(120, 999)
    return {
        "question": f"A {place} fills {per} {goods} a day. How many {goods} does it fill in {days} days?",
        "answer": per * days,
        "program": _program(per_day=per, days=days) + "print(per_day * days)\n",
        "kind": "product",
    }


def arith_grid(r: random.Random) -> dict[str, Any]:
    goods = r.choice(GOODS)[0]
    boxes, per = r.randint(140, 999), r.randint(120, 999)
    return {
        "question": f"A truck carries {boxes} boxes and every box holds {per} {goods}. How many {goods} does "
        "the truck carry?",
        "answer": boxes * per,
        "program": _program(boxes=boxes, per_box=per) + "print(boxes * per_box)\n",
        "kind": "grid",
    }


def arith_sum(r: random.Random) -> dict[str, Any]:
    name, (goods, _, _) = r.choice(NAMES), r.choice(GOODS)
    a, b, c = r.randint(10000, 99999), r.randint(10000, 99999), r.randint(10000, 99999)
    return {
        "question": f"{name}'s shop sold {a} {goods} in May, {b} in June and {c} in July. How many {goods} did "
        "it sell in those three months?",
        "answer": a + b + c,
        "program": _program(may=a, june=b, july=c) + "print(may + june + july)\n",
        "kind": "sum",
    }


def arith_left(r: random.Random) -> dict[str, Any]:
    (goods, _, boxes_), place = r.choice(GOODS), r.choice(PLACES)
    boxes, per = r.randint(120, 900), r.randint(120, 900)
    used = r.randint(1000, boxes * per - 1000)
    return {
        "question": f"A {place} has {boxes} {boxes_} of {per} {goods} each. It uses {used} {goods}. How many "
        f"{goods} are left?",
        "answer": boxes * per - used,
        "program": _program(boxes=boxes, per_box=per, used=used) + "print(boxes * per_box - used)\n",
        "kind": "left",
    }


def arith_share(r: random.Random) -> dict[str, Any]:
    (goods, box, boxes_) = r.choice(GOODS)
    groups, each = r.randint(13, 97), r.randint(1200, 9999)
    total = groups * each
    return {
        "question": f"{total} {goods} are packed equally into {groups} {boxes_}. How many {goods} go into each "
        f"{box}?",
        "answer": each,
        "program": _program(total=total, boxes=groups) + "print(total // boxes)\n",
        "kind": "share",
    }


# ---- strings: counting questions a program answers exactly ---------------------------------------------


def strings_letter(r: random.Random) -> dict[str, Any]:
    word = r.choice(WORDS)
    letter = r.choice(sorted(set(word)))
    return {
        "question": f'How many times does the letter "{letter}" appear in the word "{word}"?',
        "answer": word.count(letter),
        "program": f'print("{word}".count("{letter}"))\n',
        "kind": "letter",
    }


def strings_length(r: random.Random) -> dict[str, Any]:
    a, b = r.sample(WORDS, 2)
    text = f"{a}{b}"
    return {
        "question": f'How many letters are in the string "{text}"?',
        "answer": len(text),
        "program": f'print(len("{text}"))\n',
        "kind": "length",
    }


def strings_vowels(r: random.Random) -> dict[str, Any]:
    a, b = r.sample(WORDS, 2)
    text = f"{a} {b}"
    return {
        "question": f'How many vowels (a, e, i, o, u) are in "{text}"?',
        "answer": sum(c in "aeiou" for c in text),
        "program": f'print(sum(c in "aeiou" for c in "{text}"))\n',
        "kind": "vowels",
    }


def strings_words(r: random.Random) -> dict[str, Any]:
    sentence = f"{r.choice(SUBJECTS)} {r.choice(VERBS)} {r.choice(PLACES_TO)}{r.choice(TAILS)}"
    if r.random() < 0.5:
        sentence = f"{sentence} and {r.choice(SUBJECTS)} {r.choice(VERBS)} {r.choice(PLACES_TO)}"
    return {
        "question": f'How many words are in this sentence: "{sentence}"?',
        "answer": len(sentence.split()),
        "program": f'print(len("{sentence}".split()))\n',
        "kind": "words",
    }


def strings_digits(r: random.Random) -> dict[str, Any]:
    number = r.randint(10**7, 10**9 - 1)
    return {
        "question": f"What is the sum of the digits of the number {number}?",
        "answer": sum(int(d) for d in str(number)),
        "program": f"print(sum(int(d) for d in str({number})))\n",
        "kind": "digits",
    }


# ---- lookup: read a number out of a short text -------------------------------------------------------------


def lookup_pets(r: random.Random) -> dict[str, Any]:
    people = r.sample(NAMES, 3)
    kinds = r.sample(ANIMALS, 3)
    counts = r.sample(range(2, 20), 3)
    parts = [f"{p} has {c} {k}" for p, c, k in zip(people, counts, kinds)]
    i = r.randrange(3)
    return {
        "question": f"{parts[0]}, {parts[1]} and {parts[2]}. How many {kinds[i]} does {people[i]} have?",
        "answer": counts[i],
        "program": f"print({counts[i]})\n",
        "kind": "pets",
    }


def lookup_basket(r: random.Random) -> dict[str, Any]:
    fruits = r.sample(FRUITS, 4)
    counts = r.sample(range(2, 30), 4)
    listing = ", ".join(f"{c} {f}" for c, f in zip(counts[:3], fruits[:3])) + f" and {counts[3]} {fruits[3]}"
    i = r.randrange(4)
    return {
        "question": f"A basket holds {listing}. How many {fruits[i]} are in the basket?",
        "answer": counts[i],
        "program": f"print({counts[i]})\n",
        "kind": "basket",
    }


def lookup_ages(r: random.Random) -> dict[str, Any]:
    people = r.sample(NAMES, 3)
    ages = r.sample(range(5, 60), 3)
    i = r.randrange(3)
    return {
        "question": f"{people[0]} is {ages[0]} years old, {people[1]} is {ages[1]} and {people[2]} is "
        f"{ages[2]}. How old is {people[i]}?",
        "answer": ages[i],
        "program": f"print({ages[i]})\n",
        "kind": "ages",
    }


# ---- start: the earlier of two stated states -----------------------------------------------------------------


#: the question (also the one-agent probe's ``start`` kind, ``benchmarks/one_agent_probe.py``): name, goods, numbers
START_QUESTION = "{n} started the day with {x0} {g} and ended it with {x1}. How many {g} did {n} start the day with?"


def start_day(r: random.Random) -> dict[str, Any]:
    """The draws and question of the one-agent probe's ``start`` kind."""
    name, goods = r.choice(NAMES), r.choice(GOODS)[0]
    start, end = r.sample(range(3, 40), 2)
    return {
        "question": START_QUESTION.format(n=name, g=goods, x0=start, x1=end),
        "answer": start,
        "program": f"print({start})\n",
        "kind": "start",
    }


# ---- code: small stdin/stdout programs with public tests -------------------------------------------------

INT_INPUTS = ("0\n", "1\n", "7\n", "12\n", "25\n", "100\n", "-3\n", "58\n")
LINE_INPUTS = ("hello\n", "banana split\n", "a\n", "Mississippi River\n", "abc def ghi\n", "racecar\n")


def _ints(r: random.Random, k: int) -> list[str]:
    return [f"{x}\n" for x in r.sample(range(-20, 200), k)]


def code_linear(r: random.Random) -> dict[str, Any]:
    k, c = r.randint(2, 9), r.randint(1, 30)
    return {
        "statement": f"Read an integer n and print n multiplied by {k}, plus {c}.",
        "solution": f"n = int(input())\nprint(n * {k} + {c})\n",
        "tests": _ints(r, 6),
        "kind": "linear",
    }


def code_pair(r: random.Random) -> dict[str, Any]:
    k = r.randint(2, 9)
    what, expr = r.choice(
        (("the larger of the two", "max(a, b)"), ("the smaller of the two", "min(a, b)"),
         ("their sum", "a + b"), ("their product", "a * b"), ("a minus b", "a - b"),
         (f"a plus {k} times b", f"a + {k} * b"), (f"{k} times the larger of the two", f"{k} * max(a, b)"))
    )  # fmt: skip
    tests = [f"{r.randint(-50, 200)} {r.randint(-50, 200)}\n" for _ in range(6)]
    return {
        "statement": f"Read two integers a and b on one line, separated by a space, and print {what}.",
        "solution": f"a, b = map(int, input().split())\nprint({expr})\n",
        "tests": tests,
        "kind": "pair",
    }


def code_text(r: random.Random) -> dict[str, Any]:
    k = r.randint(2, 5)
    x, y = r.sample("aeinost", 2)
    what, expr = r.choice(
        (("the line reversed", "s[::-1]"), ("the line in upper case", "s.upper()"),
         ("the line in lower case", "s.lower()"), ("the number of characters in the line", "len(s)"),
         ("the number of words in the line", "len(s.split())"),
         ("the words of the line in reverse order", "' '.join(s.split()[::-1])"),
         (f"the first {k} characters of the line", f"s[:{k}]"), (f"the last {k} characters of the line", f"s[-{k}:]"),
         (f"the line {k} times, with no spaces between", f"s * {k}"),
         (f'the line with every "{x}" replaced by "{y}"', f's.replace("{x}", "{y}")'))
    )  # fmt: skip
    tests = list(r.sample(LINE_INPUTS, 4)) + [f"{w}\n" for w in r.sample(WORDS, 2)]
    return {
        "statement": f"Read one line of text and print {what}.",
        "solution": f"s = input()\nprint({expr})\n",
        "tests": tests,
        "kind": "text",
    }


def code_count(r: random.Random) -> dict[str, Any]:
    letter = r.choice("abcdefghilmnoprstu")
    tests = [f"{w}\n" for w in r.sample(WORDS, 6)]
    return {
        "statement": f'Read one word and print how many times the letter "{letter}" appears in it.',
        "solution": f's = input()\nprint(s.count("{letter}"))\n',
        "tests": tests,
        "kind": "count",
    }


def code_list(r: random.Random) -> dict[str, Any]:
    k = r.randint(2, 9)
    what, expr = r.choice(
        (("their sum", "sum(xs)"), ("the largest of them", "max(xs)"), ("the smallest of them", "min(xs)"),
         ("how many of them are even", "sum(x % 2 == 0 for x in xs)"),
         ("how many of them are positive", "sum(x > 0 for x in xs)"),
         (f"how many of them are divisible by {k}", f"sum(x % {k} == 0 for x in xs)"),
         (f"the sum of those greater than {k}", f"sum(x for x in xs if x > {k})"))
    )  # fmt: skip
    tests = []
    for _ in range(6):
        xs = [r.randint(-30, 99) for _ in range(r.randint(1, 7))]
        tests.append(f"{len(xs)}\n{' '.join(map(str, xs))}\n")
    return {
        "statement": f"Read an integer n on the first line and n integers on the second line, and print {what}.",
        "solution": "n = int(input())\nxs = list(map(int, input().split()))\n" + f"print({expr})\n",
        "tests": tests,
        "kind": "list",
    }


def code_parity(r: random.Random) -> dict[str, Any]:
    k = r.randint(2, 9)
    yes, no = r.choice((("YES", "NO"), ("yes", "no"), ("divisible", "not divisible")))
    return {
        "statement": f"Read an integer n and print {yes} if n is divisible by {k}, otherwise print {no}.",
        "solution": f'n = int(input())\nprint("{yes}" if n % {k} == 0 else "{no}")\n',
        "tests": [f"{k * r.randint(-5, 30)}\n", f"{k * r.randint(1, 30) + 1}\n", *_ints(r, 4)],
        "kind": "parity",
    }


def code_range(r: random.Random) -> dict[str, Any]:
    k = r.randint(1, 5)
    what, expr = r.choice(
        ((f"the first n multiples of {k}, separated by spaces", f"' '.join(str({k} * i) for i in range(1, n + 1))"),
         ("the sum of the integers from 1 to n", "n * (n + 1) // 2"),
         ("the integers from n down to 1, separated by spaces", "' '.join(str(i) for i in range(n, 0, -1))"))
    )  # fmt: skip
    return {
        "statement": f"Read a positive integer n and print {what}.",
        "solution": f"n = int(input())\nprint({expr})\n",
        "tests": [f"{x}\n" for x in r.sample(range(1, 15), 6)],
        "kind": "range",
    }


Generator = Callable[[random.Random], dict[str, Any]]

#: family -> (domain, generators); a family's tasks cycle through its generators
FAMILIES: dict[str, tuple[str, tuple[Generator, ...]]] = {
    "arith": ("math", (arith_product, arith_grid, arith_sum, arith_left, arith_share)),
    "strings": ("math", (strings_letter, strings_length, strings_vowels, strings_words, strings_digits)),
    "code": ("code", (code_linear, code_pair, code_text, code_count, code_list, code_parity, code_range)),
    "lookup": ("math", (lookup_pets, lookup_basket, lookup_ages)),
    "start": ("math", (start_day,)),
}


# ---- held-out templates: sentence templates (code: statement kinds) that no train/val/test task uses -----
#
# The ``heldout`` split of every family (``suite/heldout/``, ``metaagent-eval --benchmarks suite:heldout``):
# the same answer types as the family, asked in sentences that neither RL training (train split) nor the cold
# start (made from the train split and the bundled tasks) ever saw. Every literal piece of these templates is
# checked against the train/val/test questions, the bundled tasks and sft_data/ (tests/data/test_suite.py);
# keep the templates in HELDOUT_TEMPLATES.

#: kind -> the question template (code: the statement; ``{what}`` is one of the kind's phrases below)
HELDOUT_TEMPLATES: dict[str, str] = {
    # arith
    "orchard": "An orchard is planted in {rows} rows with {per} trees in each row. What is the number of trees "
    "in the orchard?",
    "tickets": "Each ticket to the fair costs {price} coins and {people} visitors buy one ticket each. What do the "
    "visitors pay altogether, in coins?",
    "library": "Last year the town library lent out {a} books. This year it lent out {b} books. By how many books "
    "did the lending grow?",
    "classrooms": "A school ordered {total} chairs for its {rooms} classrooms, the same number for every room. "
    "What number of chairs does one room receive?",
    # strings
    "consonants": 'Count the consonants in the word "{word}", treating y as a consonant.',
    "distinct": 'The word "{word}" is written on a card. Count the different letters used on the card.',
    "first_position": 'Counting from 1, at what position is the first "{letter}" in the word "{word}"?',
    "longest_word": 'Find the longest word of the phrase "{phrase}". Give its number of letters.',
    # lookup
    "scores": "In the quiz {p0} scored {s0} points, {p1} got {s1} points and {p2} ended with {s2} points. What was "
    "the score of {pi}?",
    "shelves": "The top shelf holds {c0} books, the middle shelf {c1} books and the bottom shelf {c2} books. What "
    "number of books stands on the {shelf} shelf?",
    # start
    "morning_evening": "In the morning {n} had {x0} {g}. By the evening {n} had {x1} {g}. What was the number of "
    "{g} {n} had in the morning?",
    "before_trip": "Before the trip {n} owned {x0} {g}. After the trip {n} owned {x1} {g}. What number of {g} did "
    "{n} own before the trip?",
    # code
    "digits": "Given one integer on standard input, output {what}.",
    "palindrome": "Given one word on standard input, output {yes} when the word equals its own reversal and "
    "{no} otherwise.",
    "spread": "The input is a count k followed, on the next line, by k integers. Output {what}.",
    "words_each": "The input is one line of words separated by single spaces. Output {what}.",
}

#: code kinds: (phrase, expression) choices for ``{what}``, each with a parameter ``{k}`` (2-9) or ``{d}`` (a digit)
DIGITS_WHAT = (
    ("the count of its digits (sign left out) equal to {d}", "str(abs(n)).count('{d}')"),
    ("{k} times the digit sum of its absolute value", "{k} * sum(int(c) for c in str(abs(n)))"),
    ("its square, increased by {k}", "n * n + {k}"),
    ("the remainder of its absolute value on division by {k}", "abs(n) % {k}"),
)
SPREAD_WHAT = (
    ("the gap between their maximum and their minimum, increased by {k}", "max(xs) - min(xs) + {k}"),
    ("the count of values that are at least {k}", "sum(x >= {k} for x in xs)"),
    ("all values in ascending order, each scaled by {k}, one space apart", "' '.join(str({k} * x) for x in sorted(xs))"),
    ("{k} times the total of their squares", "{k} * sum(x * x for x in xs)"),
)
WORDS_EACH_WHAT = (
    ("the opening {k} letters of each word, one space apart", "' '.join(w[:{k}] for w in s.split())"),
    ("only the words with more than {k} letters, one space apart", "' '.join(w for w in s.split() if len(w) > {k})"),
    ("each word spelt backwards, words kept in place, plus {k} exclamation marks at the end",
     "' '.join(w[::-1] for w in s.split()) + '!' * {k}"),
    ("each word's length multiplied by {k}, one space apart", "' '.join(str({k} * len(w)) for w in s.split())"),
)  # fmt: skip
#: the two answers of the palindrome kind
PALINDROME_ANSWERS = (
    ("YES", "NO"), ("palindrome", "not a palindrome"), ("true", "false"), ("same", "different"), ("1", "0"),
    ("mirror", "plain"), ("Y", "N"), ("symmetric", "asymmetric"), ("ok", "no"), ("match", "mismatch"),
    ("T", "F"), ("equal", "unequal"),
)  # fmt: skip
SHELVES = ("top", "middle", "bottom")
PHRASE_WORDS = WORDS  # the phrases of the longest-word question are built from the suite's word list


def arith_orchard(r: random.Random) -> dict[str, Any]:
    rows, per = r.randint(120, 999), r.randint(120, 999)
    return {
        "question": HELDOUT_TEMPLATES["orchard"].format(rows=rows, per=per),
        "answer": rows * per,
        "program": _program(rows=rows, per_row=per) + "print(rows * per_row)\n",
        "kind": "orchard",
    }


def arith_tickets(r: random.Random) -> dict[str, Any]:
    price, people = r.randint(120, 999), r.randint(1200, 9999)
    return {
        "question": HELDOUT_TEMPLATES["tickets"].format(price=price, people=people),
        "answer": price * people,
        "program": _program(price=price, people=people) + "print(price * people)\n",
        "kind": "tickets",
    }


def arith_library(r: random.Random) -> dict[str, Any]:
    a = r.randint(10000, 89999)
    b = a + r.randint(1000, 9999)
    return {
        "question": HELDOUT_TEMPLATES["library"].format(a=a, b=b),
        "answer": b - a,
        "program": _program(last_year=a, this_year=b) + "print(this_year - last_year)\n",
        "kind": "library",
    }


def arith_classrooms(r: random.Random) -> dict[str, Any]:
    rooms, each = r.randint(13, 97), r.randint(120, 999)
    return {
        "question": HELDOUT_TEMPLATES["classrooms"].format(total=rooms * each, rooms=rooms),
        "answer": each,
        "program": _program(total=rooms * each, rooms=rooms) + "print(total // rooms)\n",
        "kind": "classrooms",
    }


def strings_consonants(r: random.Random) -> dict[str, Any]:
    word = r.choice(WORDS)
    return {
        "question": HELDOUT_TEMPLATES["consonants"].format(word=word),
        "answer": sum(c not in "aeiou" for c in word),
        "program": f'print(sum(c not in "aeiou" for c in "{word}"))\n',
        "kind": "consonants",
    }


def strings_distinct(r: random.Random) -> dict[str, Any]:
    word = r.choice(WORDS)
    return {
        "question": HELDOUT_TEMPLATES["distinct"].format(word=word),
        "answer": len(set(word)),
        "program": f'print(len(set("{word}")))\n',
        "kind": "distinct",
    }


def strings_first_position(r: random.Random) -> dict[str, Any]:
    word = r.choice(WORDS)
    letter = r.choice(sorted(set(word)))
    return {
        "question": HELDOUT_TEMPLATES["first_position"].format(letter=letter, word=word),
        "answer": word.index(letter) + 1,
        "program": f'print("{word}".index("{letter}") + 1)\n',
        "kind": "first_position",
    }


def strings_longest_word(r: random.Random) -> dict[str, Any]:
    words = r.sample(PHRASE_WORDS, 3)
    phrase = " ".join(words)
    return {
        "question": HELDOUT_TEMPLATES["longest_word"].format(phrase=phrase),
        "answer": max(len(w) for w in words),
        "program": f'print(max(len(w) for w in "{phrase}".split()))\n',
        "kind": "longest_word",
    }


def lookup_scores(r: random.Random) -> dict[str, Any]:
    people = r.sample(NAMES, 3)
    scores = r.sample(range(2, 40), 3)
    i = r.randrange(3)
    fields = {f"p{k}": p for k, p in enumerate(people)} | {f"s{k}": s for k, s in enumerate(scores)}
    return {
        "question": HELDOUT_TEMPLATES["scores"].format(**fields, pi=people[i]),
        "answer": scores[i],
        "program": f"print({scores[i]})\n",
        "kind": "scores",
    }


def lookup_shelves(r: random.Random) -> dict[str, Any]:
    counts = r.sample(range(3, 60), 3)
    i = r.randrange(3)
    return {
        "question": HELDOUT_TEMPLATES["shelves"].format(c0=counts[0], c1=counts[1], c2=counts[2], shelf=SHELVES[i]),
        "answer": counts[i],
        "program": f"print({counts[i]})\n",
        "kind": "shelves",
    }


def _start_heldout(kind: str):
    def generator(r: random.Random) -> dict[str, Any]:
        name, goods = r.choice(NAMES), r.choice(GOODS)[0]
        start, end = r.sample(range(3, 40), 2)
        return {
            "question": HELDOUT_TEMPLATES[kind].format(n=name, g=goods, x0=start, x1=end),
            "answer": start,
            "program": f"print({start})\n",
            "kind": kind,
        }

    generator.__name__ = f"start_{kind}"
    return generator


def _what(r: random.Random, choices: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """One (phrase, expression) of a held-out code kind with its parameter drawn: k in 2-9, d a digit."""
    phrase, expr = r.choice(choices)
    k, d = r.randint(2, 9), r.randint(0, 9)
    return phrase.format(k=k, d=d), expr.format(k=k, d=d)


def code_digits(r: random.Random) -> dict[str, Any]:
    what, expr = _what(r, DIGITS_WHAT)
    return {
        "statement": HELDOUT_TEMPLATES["digits"].format(what=what),
        "solution": f"n = int(input())\nprint({expr})\n",
        "tests": [f"{x}\n" for x in r.sample([*range(-9999, -9, 37), *range(10, 99999, 313)], 6)],
        "kind": "digits",
    }


def code_palindrome(r: random.Random) -> dict[str, Any]:
    yes, no = r.choice(PALINDROME_ANSWERS)
    same = ["racecar\n", "level\n", "noon\n", "refer\n", "kayak\n", "rotor\n"]
    tests = [*r.sample(same, 2), *(f"{w}\n" for w in r.sample(WORDS, 4))]
    r.shuffle(tests)
    return {
        "statement": HELDOUT_TEMPLATES["palindrome"].format(yes=yes, no=no),
        "solution": f's = input()\nprint("{yes}" if s == s[::-1] else "{no}")\n',
        "tests": tests,
        "kind": "palindrome",
    }


def code_spread(r: random.Random) -> dict[str, Any]:
    what, expr = _what(r, SPREAD_WHAT)
    tests = []
    for _ in range(6):
        xs = [r.randint(-9, 30) for _ in range(r.randint(2, 6))]
        tests.append(f"{len(xs)}\n{' '.join(map(str, xs))}\n")
    return {
        "statement": HELDOUT_TEMPLATES["spread"].format(what=what),
        "solution": "k = int(input())\nxs = list(map(int, input().split()))\n" + f"print({expr})\n",
        "tests": tests,
        "kind": "spread",
    }


def code_words_each(r: random.Random) -> dict[str, Any]:
    what, expr = _what(r, WORDS_EACH_WHAT)
    tests = [f"{' '.join(r.sample(WORDS, r.randint(2, 4)))}\n" for _ in range(6)]
    return {
        "statement": HELDOUT_TEMPLATES["words_each"].format(what=what),
        "solution": f"s = input()\nprint({expr})\n",
        "tests": tests,
        "kind": "words_each",
    }


#: family -> (domain, generators) of the held-out split (kinds and templates apart from FAMILIES')
HELDOUT_FAMILIES: dict[str, tuple[str, tuple[Generator, ...]]] = {
    "arith": ("math", (arith_orchard, arith_tickets, arith_library, arith_classrooms)),
    "strings": ("math", (strings_consonants, strings_distinct, strings_first_position, strings_longest_word)),
    "code": ("code", (code_digits, code_palindrome, code_spread, code_words_each)),
    "lookup": ("math", (lookup_scores, lookup_shelves)),
    "start": ("math", (_start_heldout("morning_evening"), _start_heldout("before_trip"))),
}
