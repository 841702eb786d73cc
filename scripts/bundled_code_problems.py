"""The bundled code problems: original, simple, graded (level 1-3), each with a reference solution.

Written for metaagent (not copied from any dataset). ``kind`` is ``stdio`` (read stdin, print) or ``call``
(a function ``fn_name``; one problem uses a LeetCode-style ``class Solution``). ``tests`` are inputs only:
the generator computes expected outputs by running the reference solution, then checks the reference
passes through the real runner.
"""

from __future__ import annotations

from typing import Any


def stdio(name: str, level: int, statement: str, solution: str, tests: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "level": level,
        "kind": "stdio",
        "statement": statement,
        "solution": solution,
        "tests": tests,
    }


def call(
    name: str, level: int, signature: str, statement: str, solution: str, tests: list[list[Any]]
) -> dict[str, Any]:
    fn_name = signature.split("(")[0]
    return {
        "name": name,
        "level": level,
        "kind": "call",
        "fn_name": fn_name,
        "signature": signature,
        "statement": statement,
        "solution": solution,
        "tests": tests,
    }


PROBLEMS: list[dict[str, Any]] = [
    # ---- level 1 ----------------------------------------------------------------------------------------
    stdio(
        "sum_two",
        1,
        "Read two integers a and b on one line and print a + b.",
        "a, b = map(int, input().split())\nprint(a + b)\n",
        ["1 2\n", "10 -3\n", "0 0\n", "123 877\n", "-5 -6\n"],
    ),
    call(
        "reverse_string",
        1,
        "reverse_string(s)",
        "Return the string s reversed.",
        "def reverse_string(s):\n    return s[::-1]\n",
        [["hello"], [""], ["a"], ["racecar"], ["ab cd"]],
    ),
    call(
        "sum_list",
        1,
        "sum_list(nums)",
        "Return the sum of the integers in the list nums (0 for an empty list).",
        "def sum_list(nums):\n    return sum(nums)\n",
        [[[1, 2, 3]], [[]], [[-1, 1]], [[100]], [[5, 5, 5, 5]]],
    ),
    stdio(
        "max_of_three",
        1,
        "Read three integers on one line and print the largest.",
        "print(max(map(int, input().split())))\n",
        ["1 2 3\n", "9 4 7\n", "-1 -2 -3\n", "5 5 5\n", "0 10 -10\n"],
    ),
    call(
        "is_even",
        1,
        "is_even(n)",
        "Return True if the integer n is even, otherwise False.",
        "def is_even(n):\n    return n % 2 == 0\n",
        [[2], [7], [0], [-4], [13]],
    ),
    stdio(
        "square",
        1,
        "Read one integer n and print n squared.",
        "n = int(input())\nprint(n * n)\n",
        ["3\n", "0\n", "-4\n", "12\n", "100\n"],
    ),
    call(
        "count_vowels",
        1,
        "count_vowels(s)",
        "Return how many vowels (a, e, i, o, u, upper or lower case) the string s contains.",
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n",
        [["hello"], ["sky"], ["AEIOU"], [""], ["Programming is fun"]],
    ),
    call(
        "string_length",
        1,
        "string_length(s)",
        "Return the number of characters in the string s.",
        "def string_length(s):\n    return len(s)\n",
        [["abc"], [""], ["hello world"], ["x"]],
    ),
    stdio(
        "hello_name",
        1,
        "Read a name on one line and print `Hello, <name>!`.",
        "name = input().strip()\nprint(f'Hello, {name}!')\n",
        ["Ada\n", "Bob\n", "World\n"],
    ),
    stdio(
        "absolute_difference",
        1,
        "Read two integers on one line and print the absolute value of their difference.",
        "a, b = map(int, input().split())\nprint(abs(a - b))\n",
        ["3 10\n", "10 3\n", "-5 5\n", "7 7\n"],
    ),
    call(
        "minimum",
        1,
        "minimum(nums)",
        "Return the smallest integer in the non-empty list nums.",
        "def minimum(nums):\n    return min(nums)\n",
        [[[3, 1, 2]], [[5]], [[-7, 0, 7]], [[4, 4, 4]]],
    ),
    call(
        "repeat_string",
        1,
        "repeat_string(s, n)",
        "Return the string s repeated n times.",
        "def repeat_string(s, n):\n    return s * n\n",
        [["ab", 3], ["x", 0], ["", 5], ["hi", 1]],
    ),
    stdio(
        "count_words",
        1,
        "Read one line of text and print how many words (separated by spaces) it has.",
        "print(len(input().split()))\n",
        ["the quick brown fox\n", "hello\n", "  spaced   out  words \n", "a b c d e f\n"],
    ),
    call(
        "to_upper",
        1,
        "to_upper(s)",
        "Return the string s with every letter in upper case.",
        "def to_upper(s):\n    return s.upper()\n",
        [["hello"], ["MiXeD 123"], [""], ["already UPPER"]],
    ),
    stdio(
        "times_table",
        1,
        "Read an integer n and print n*1, n*2, ..., n*5 on one line, separated by spaces.",
        "n = int(input())\nprint(*[n * i for i in range(1, 6)])\n",
        ["2\n", "7\n", "0\n", "-3\n"],
    ),
    call(
        "celsius_to_fahrenheit",
        1,
        "celsius_to_fahrenheit(c)",
        "Return the temperature c (degrees Celsius) in degrees Fahrenheit: c * 9 / 5 + 32.",
        "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
        [[0], [100], [-40], [37], [21.5]],
    ),
    # ---- level 2 ----------------------------------------------------------------------------------------
    stdio(
        "fizzbuzz",
        2,
        "Read an integer n. For each i from 1 to n print one line: `FizzBuzz` if i is divisible by 3 and 5, "
        "`Fizz` if only by 3, `Buzz` if only by 5, otherwise i.",
        "n = int(input())\nfor i in range(1, n + 1):\n"
        "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n",
        ["5\n", "15\n", "1\n", "16\n"],
    ),
    call(
        "is_palindrome",
        2,
        "is_palindrome(s)",
        "Return True if s reads the same backwards, ignoring case and every character that is not a letter "
        "or digit.",
        "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        [["A man, a plan, a canal: Panama"], ["hello"], [""], ["No lemon, no melon"], ["ab"]],
    ),
    call(
        "factorial",
        2,
        "factorial(n)",
        "Return n! for an integer n >= 0 (0! = 1).",
        "def factorial(n):\n    out = 1\n    for i in range(2, n + 1):\n        out *= i\n    return out\n",
        [[0], [1], [5], [10], [20]],
    ),
    call(
        "fibonacci",
        2,
        "fibonacci(n)",
        "Return the n-th Fibonacci number, with fibonacci(0) = 0 and fibonacci(1) = 1.",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        [[0], [1], [2], [10], [50]],
    ),
    call(
        "count_char",
        2,
        "count_char(s, c)",
        "Return how many times the character c occurs in the string s.",
        "def count_char(s, c):\n    return s.count(c)\n",
        [["banana", "a"], ["banana", "z"], ["", "a"], ["aaaa", "a"]],
    ),
    call(
        "second_largest",
        2,
        "second_largest(nums)",
        "Return the second largest distinct value in the list nums, or None if there is none.",
        "def second_largest(nums):\n    values = sorted(set(nums))\n    return values[-2] if len(values) >= 2 else None\n",
        [[[1, 2, 3]], [[5, 5, 5]], [[7]], [[4, 9, 9, 2]], [[-1, -2]]],
    ),
    stdio(
        "sum_digits",
        2,
        "Read an integer n (possibly negative) and print the sum of its decimal digits.",
        "n = abs(int(input()))\nprint(sum(int(d) for d in str(n)))\n",
        ["123\n", "-45\n", "0\n", "9999\n"],
    ),
    stdio(
        "gcd",
        2,
        "Read two positive integers on one line and print their greatest common divisor.",
        "a, b = map(int, input().split())\nwhile b:\n    a, b = b, a % b\nprint(a)\n",
        ["12 18\n", "7 13\n", "100 10\n", "81 27\n"],
    ),
    call(
        "remove_duplicates",
        2,
        "remove_duplicates(items)",
        "Return a list of the items of the list items without repeats, keeping the first occurrence order.",
        "def remove_duplicates(items):\n    seen, out = set(), []\n    for x in items:\n        if x not in seen:\n"
        "            seen.add(x)\n            out.append(x)\n    return out\n",
        [[[1, 2, 1, 3, 2]], [[]], [["a", "b", "a"]], [[4, 4, 4]]],
    ),
    stdio(
        "most_frequent_word",
        2,
        "Read one line of lower-case words separated by spaces and print the most frequent word; on a tie "
        "print the alphabetically smallest of the tied words.",
        "from collections import Counter\nc = Counter(input().split())\nbest = max(c.values())\n"
        "print(min(w for w, n in c.items() if n == best))\n",
        ["the cat and the dog\n", "b a\n", "x y x y z\n", "solo\n"],
    ),
    call(
        "running_sum",
        2,
        "running_sum(nums)",
        "Return the list of running totals of nums: element i is nums[0] + ... + nums[i].",
        "def running_sum(nums):\n    out, total = [], 0\n    for x in nums:\n        total += x\n"
        "        out.append(total)\n    return out\n",
        [[[1, 2, 3, 4]], [[]], [[5]], [[3, -3, 3]]],
    ),
    stdio(
        "count_primes",
        2,
        "Read an integer n and print how many prime numbers are less than or equal to n.",
        "n = int(input())\nprint(sum(1 for k in range(2, n + 1) if all(k % d for d in range(2, int(k ** 0.5) + 1))))\n",
        ["10\n", "1\n", "2\n", "100\n"],
    ),
    call(
        "is_prime",
        2,
        "is_prime(n)",
        "Return True if the integer n is a prime number, otherwise False.",
        "def is_prime(n):\n    if n < 2:\n        return False\n    d = 2\n    while d * d <= n:\n"
        "        if n % d == 0:\n            return False\n        d += 1\n    return True\n",
        [[2], [1], [17], [18], [97], [0]],
    ),
    call(
        "caesar_shift",
        2,
        "caesar_shift(s, k)",
        "Shift every letter of s forward by k places in the alphabet, wrapping from z to a and keeping case; "
        "other characters stay. Return the result.",
        "def caesar_shift(s, k):\n    out = []\n    for c in s:\n        if c.isalpha():\n"
        "            base = ord('a') if c.islower() else ord('A')\n"
        "            out.append(chr((ord(c) - base + k) % 26 + base))\n        else:\n            out.append(c)\n"
        "    return ''.join(out)\n",
        [["abc", 1], ["xyz", 3], ["Hello, World!", 13], ["", 5]],
    ),
    call(
        "parse_key_values",
        2,
        "parse_key_values(text)",
        "text looks like `a=1;b=22;c=-3`. Return a dict mapping each key to its integer value "
        "(an empty text gives an empty dict).",
        "def parse_key_values(text):\n    out = {}\n    for part in text.split(';'):\n        if part:\n"
        "            key, value = part.split('=')\n            out[key] = int(value)\n    return out\n",
        [["a=1;b=22;c=-3"], [""], ["x=0"], ["k=5;k2=6"]],
    ),
    stdio(
        "average",
        2,
        "The first line has an integer n, the second line n integers. Print their average with exactly two "
        "digits after the decimal point.",
        "n = int(input())\nvalues = list(map(int, input().split()))\nprint(f'{sum(values) / n:.2f}')\n",
        ["3\n1 2 3\n", "2\n1 2\n", "4\n10 20 30 41\n", "1\n-7\n"],
    ),
    call(
        "to_binary",
        2,
        "to_binary(n)",
        "Return the binary representation of the integer n >= 0 as a string.",
        "def to_binary(n):\n    return bin(n)[2:]\n",
        [[0], [1], [5], [255], [1024]],
    ),
    call(
        "title_case",
        2,
        "title_case(s)",
        "Return s with the first letter of every space-separated word in upper case and the rest in lower case.",
        "def title_case(s):\n    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))\n",
        [["hello world"], ["PYTHON is FUN"], ["a"], [""]],
    ),
    stdio(
        "matrix_sum",
        2,
        "The first line has two integers r and c, then r lines with c integers each. Print the sum of all "
        "the numbers.",
        "r, c = map(int, input().split())\nprint(sum(sum(map(int, input().split())) for _ in range(r)))\n",
        ["2 2\n1 2\n3 4\n", "1 3\n5 5 5\n", "3 1\n-1\n0\n1\n"],
    ),
    call(
        "evens_only",
        2,
        "evens_only(nums)",
        "Return the even numbers of nums, in their original order.",
        "def evens_only(nums):\n    return [x for x in nums if x % 2 == 0]\n",
        [[[1, 2, 3, 4]], [[1, 3]], [[]], [[0, -2, 5]]],
    ),
    call(
        "longest_word",
        2,
        "longest_word(sentence)",
        "Return the longest space-separated word of sentence; if several are longest, the first of them.",
        "def longest_word(sentence):\n    best = ''\n    for w in sentence.split():\n        if len(w) > len(best):\n"
        "            best = w\n    return best\n",
        [["the quick brown fox"], ["a bb cc"], ["single"], ["jumped over lazy dogs"]],
    ),
    stdio(
        "count_lines",
        2,
        "Read all lines of standard input and print how many of them are not empty.",
        "import sys\nprint(sum(1 for line in sys.stdin if line.strip()))\n",
        ["a\nb\n\nc\n", "\n\n", "only\n", "x\n \ny\n"],
    ),
    # ---- level 3 ----------------------------------------------------------------------------------------
    call(
        "balanced_brackets",
        3,
        "balanced_brackets(s)",
        "Return True if every bracket in s ((), [] and {}) is closed in the right order, otherwise False. "
        "Other characters are ignored.",
        "def balanced_brackets(s):\n    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n    for c in s:\n"
        "        if c in '([{':\n            stack.append(c)\n        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n    return not stack\n",
        [["([]{})"], ["(]"], [""], ["((a)"], ["{[()()]}"], ["())("]],
    ),
    call(
        "run_length_encode",
        3,
        "run_length_encode(s)",
        "Return the run-length encoding of s: each run of equal characters becomes the character followed by "
        "the run length, e.g. `aaabcc` -> `a3b1c2`.",
        "def run_length_encode(s):\n    out, i = [], 0\n    while i < len(s):\n        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n            j += 1\n        out.append(f'{s[i]}{j - i}')\n"
        "        i = j\n    return ''.join(out)\n",
        [["aaabcc"], [""], ["abc"], ["zzzzzzzzzzzz"]],
    ),
    call(
        "are_anagrams",
        3,
        "are_anagrams(a, b)",
        "Return True if the strings a and b use the same letters the same number of times, ignoring spaces "
        "and case.",
        "def are_anagrams(a, b):\n    norm = lambda s: sorted(s.replace(' ', '').lower())\n    return norm(a) == norm(b)\n",
        [["listen", "silent"], ["Dormitory", "dirty room"], ["abc", "abd"], ["", ""]],
    ),
    call(
        "two_sum",
        3,
        "two_sum(nums, target)",
        "Return [i, j] with i < j such that nums[i] + nums[j] == target, choosing the smallest i and then the "
        "smallest j; return [] if there is no such pair.",
        "def two_sum(nums, target):\n    for i in range(len(nums)):\n        for j in range(i + 1, len(nums)):\n"
        "            if nums[i] + nums[j] == target:\n                return [i, j]\n    return []\n",
        [[[2, 7, 11, 15], 9], [[3, 2, 4], 6], [[1, 2], 5], [[1, 1, 1], 2]],
    ),
    call(
        "merge_sorted",
        3,
        "merge_sorted(a, b)",
        "Merge the sorted lists a and b into one sorted list and return it.",
        "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
        "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n",
        [[[1, 3, 5], [2, 4, 6]], [[], [1]], [[1, 1], [1]], [[-3, 0], [-2, 10]]],
    ),
    call(
        "roman_to_int",
        3,
        "roman_to_int(s)",
        "Convert the Roman numeral s (I, V, X, L, C, D, M) to an integer.",
        "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    total = 0\n    for i, c in enumerate(s):\n        if i + 1 < len(s) and v[c] < v[s[i + 1]]:\n"
        "            total -= v[c]\n        else:\n            total += v[c]\n    return total\n",
        [["III"], ["IV"], ["IX"], ["LVIII"], ["MCMXCIV"]],
    ),
    stdio(
        "totals_by_name",
        3,
        "Each input line is `name,amount` with an integer amount. Print one line `name total` per name, "
        "sorted by name, where total is the sum of that name's amounts.",
        "import sys\ntotals = {}\nfor line in sys.stdin:\n    line = line.strip()\n    if line:\n"
        "        name, amount = line.split(',')\n        totals[name] = totals.get(name, 0) + int(amount)\n"
        "for name in sorted(totals):\n    print(name, totals[name])\n",
        ["bob,5\nann,3\nbob,-2\n", "x,1\n", "c,1\nb,2\na,3\n"],
    ),
    call(
        "max_subarray",
        3,
        "max_subarray(nums)",
        "Return the largest sum of a non-empty run of consecutive elements of the non-empty list nums.",
        "def max_subarray(nums):\n    best = cur = nums[0]\n    for x in nums[1:]:\n        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n    return best\n",
        [[[-2, 1, -3, 4, -1, 2, 1, -5, 4]], [[1]], [[-3, -1, -2]], [[5, 4, -1, 7, 8]]],
    ),
    call(
        "rotate_right",
        3,
        "rotate_right(items, k)",
        "Return the list items rotated right by k places (k may exceed the length; an empty list stays empty).",
        "def rotate_right(items, k):\n    if not items:\n        return []\n    k %= len(items)\n"
        "    return items[-k:] + items[:-k] if k else list(items)\n",
        [[[1, 2, 3, 4, 5], 2], [[1, 2, 3], 0], [[], 3], [[1, 2], 5]],
    ),
    stdio(
        "min_max_sum",
        3,
        "Read integers separated by spaces or newlines until the end of input. Print their minimum, maximum "
        "and sum on one line, separated by spaces.",
        "import sys\nvalues = list(map(int, sys.stdin.read().split()))\nprint(min(values), max(values), sum(values))\n",
        ["3 1 2\n", "5\n", "-1\n-5 10\n7\n"],
    ),
    call(
        "transpose",
        3,
        "transpose(matrix)",
        "Return the transpose of the rectangular matrix given as a list of rows.",
        "def transpose(matrix):\n    return [list(row) for row in zip(*matrix)]\n",
        [[[[1, 2, 3], [4, 5, 6]]], [[[1]]], [[[1, 2], [3, 4], [5, 6]]]],
    ),
    call(
        "digital_root",
        3,
        "digital_root(n)",
        "Repeatedly replace the integer n >= 0 by the sum of its digits until one digit is left; return it.",
        "def digital_root(n):\n    while n >= 10:\n        n = sum(int(d) for d in str(n))\n    return n\n",
        [[0], [9], [38], [493193], [10]],
    ),
    stdio(
        "leap_years",
        3,
        "Read two years y1 <= y2 on one line and print how many leap years are between them, inclusive. A year "
        "is a leap year if it is divisible by 4, except years divisible by 100 that are not divisible by 400.",
        "a, b = map(int, input().split())\n"
        "print(sum(1 for y in range(a, b + 1) if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)))\n",
        ["2000 2004\n", "1900 1900\n", "2001 2003\n", "1896 1912\n"],
    ),
    call(
        "collapse_spaces",
        3,
        "collapse_spaces(s)",
        "Return s with leading and trailing spaces removed and every run of spaces inside replaced by one space.",
        "def collapse_spaces(s):\n    return ' '.join(w for w in s.split(' ') if w)\n",
        [["  hello   world  "], ["a"], ["   "], ["one two  three"]],
    ),
    stdio(
        "letter_counts",
        3,
        "Read one line of text. For each lower-case letter that occurs in it, in alphabetical order, print a "
        "line with the letter and its count separated by a space.",
        "from collections import Counter\nc = Counter(ch for ch in input() if 'a' <= ch <= 'z')\n"
        "for ch in sorted(c):\n    print(ch, c[ch])\n",
        ["hello world\n", "aaa\n", "Zebra crossing\n"],
    ),
    call(
        "climb_stairs",
        3,
        "climb_stairs(n)",
        "A staircase has n >= 1 steps and you climb 1 or 2 steps at a time. Return the number of distinct ways "
        "to reach the top. Write it as a method of `class Solution`.",
        "class Solution:\n    def climb_stairs(self, n: int) -> int:\n        a, b = 1, 1\n"
        "        for _ in range(n):\n            a, b = b, a + b\n        return a\n",
        [[1], [2], [3], [10], [30]],
    ),
]
