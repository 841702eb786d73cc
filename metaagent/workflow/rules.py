"""What a workflow script may contain: the allow-lists, as plain data in one place.

Everything not listed here is refused. Scripts import nothing: the API, the builtins below and the
tools are all they need (answer extraction is ``boxed``, voting is ``majority``). Three components read
these tables and must agree:

- the checker (:mod:`metaagent.workflow.checker`) refuses a script statically, with a diagnostic the designer
  can act on;
- the sandbox worker (:mod:`metaagent.workflow.guards`) builds the script's builtins and attribute guard from
  the same names, so a script that skipped the checker meets the same walls at run time;
- :func:`metaagent.workflow.api.api_reference` tells the designer what is available.

To allow something new, add it here (and think about what it exposes: every attribute name below is allowed
on *every* object a script can reach).
"""

from __future__ import annotations

# ---- names a script sees --------------------------------------------------------------------------------

#: the workflow API (defined in metaagent.workflow.api), the task text, and print (collected, capped)
API_NAMES: tuple[str, ...] = ("Agent", "parallel", "submit", "boxed", "majority")
TASK_NAME = "task"

#: tools that metaagent.workflow.tools.default_tools provides; other tools are passed to the checker by name
DEFAULT_TOOL_NAMES: tuple[str, ...] = ("run_tests", "run_program")
#: tools some task domains add (``Domain.tool_names``: ``retrieve`` for qa, the environment tools for plan) are
#: listed by :func:`metaagent.domain.domain_tool_names`; fixed workflows are checked with them

#: harmless builtins exposed to scripts (the sandbox's builtins dict holds exactly these)
SAFE_BUILTINS: tuple[str, ...] = (
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float", "int",
    "isinstance", "len", "list", "map", "max", "min", "ord", "range", "repr", "reversed", "round",
    "set", "sorted", "str", "sum", "tuple", "zip",
)  # fmt: skip
SAFE_CONSTANTS: tuple[str, ...] = ("True", "False", "None")
#: exception classes a script may raise or catch (no BaseException subclasses outside Exception)
SAFE_EXCEPTIONS: tuple[str, ...] = (
    "Exception", "ArithmeticError", "AssertionError", "IndexError", "KeyError", "LookupError",
    "RuntimeError", "TypeError", "ValueError", "ZeroDivisionError",
)  # fmt: skip
#: names turned into something else by RestrictedPython (print -> capped collector)
SPECIAL_NAMES: tuple[str, ...] = ("print",)

#: the largest range() a script may build; ordinary loops are far below
MAX_RANGE = 1_000_000

#: builtins that are refused with a specific explanation (everything else unknown is "not defined")
FORBIDDEN_NAMES: dict[str, str] = {
    "exec": "runs arbitrary code",
    "eval": "runs arbitrary code",
    "compile": "builds code objects",
    "open": "file access",
    "input": "reads from the console",
    "globals": "exposes the namespace",
    "locals": "exposes the namespace",
    "vars": "exposes object internals",
    "dir": "introspection",
    "getattr": "dynamic attribute access",
    "setattr": "dynamic attribute access",
    "delattr": "dynamic attribute access",
    "hasattr": "dynamic attribute access",
    "type": "introspection of classes",
    "object": "introspection of classes",
    "super": "introspection of classes",
    "classmethod": "class machinery",
    "staticmethod": "class machinery",
    "property": "class machinery",
    "memoryview": "raw memory access",
    "bytearray": "raw memory access",
    "breakpoint": "the debugger",
    "help": "the interactive help",
    "exit": "ends the interpreter",
    "quit": "ends the interpreter",
    "iter": "manual iteration (use a for loop)",
    "next": "manual iteration (use a for loop)",
    "id": "object identity",
    "hash": "hashing is process-dependent",
    "format": "format strings can read attributes (use an f-string)",
    "BaseException": "catching it would swallow submit() (use Exception)",
    "SystemExit": "ends the interpreter",
    "KeyboardInterrupt": "interrupts the interpreter",
    "GeneratorExit": "generator machinery",
}

# ---- attributes --------------------------------------------------------------------------------------------

_STR_METHODS = (
    "capitalize", "casefold", "center", "count", "endswith", "find", "index", "isalnum", "isalpha",
    "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "isupper", "join", "ljust", "lower",
    "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title",
    "upper", "zfill",
)  # fmt: skip
_LIST_METHODS = ("append", "clear", "copy", "extend", "insert", "pop", "remove", "reverse", "sort")
_DICT_METHODS = ("get", "items", "keys", "values", "setdefault", "update")
_SET_METHODS = ("add", "discard", "union", "intersection", "difference", "issubset", "issuperset")
_AGENT_ATTRIBUTES = ("name", "system_prompt", "memory")

#: the only attribute names a script may read, on any object (checked statically and at run time)
ALLOWED_ATTRIBUTES: frozenset[str] = frozenset(
    _STR_METHODS + _LIST_METHODS + _DICT_METHODS + _SET_METHODS + _AGENT_ATTRIBUTES
)

#: hints for attributes LLMs commonly reach for
ATTRIBUTE_HINTS: dict[str, str] = {
    "format": 'str.format can read attributes through its format string; use an f-string: f"... {x} ..."',
    "format_map": "use an f-string",
    "encode": "scripts work with text only",
    "decode": "scripts work with text only",
    "history": "an agent's conversation is private; pass what another agent needs in the message",
}

#: attributes that reach interpreter internals (frames, code, tracebacks); named in the refusal message
INTROSPECTION_ATTRIBUTES: frozenset[str] = frozenset(
    (
        "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "cr_frame", "cr_code", "cr_await", "ag_frame",
        "ag_code", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace", "tb_frame", "tb_next",
        "co_code", "func_globals", "with_traceback", "mro", "send", "throw", "close",
    )
)  # fmt: skip

# ---- syntax ---------------------------------------------------------------------------------------------

#: statement kinds (libcst class names) a script may use
ALLOWED_STATEMENTS: frozenset[str] = frozenset(
    (
        "Assign", "AugAssign", "Expr", "Pass", "Break", "Continue", "Return", "Assert", "Raise", "Del",
        "If", "For", "While", "FunctionDef", "Try",
    )
)  # fmt: skip

#: expression kinds (libcst class names) a script may use
ALLOWED_EXPRESSIONS: frozenset[str] = frozenset(
    (
        "Attribute", "BinaryOperation", "BooleanOperation", "Call", "Comparison", "ConcatenatedString",
        "Dict", "DictComp", "Ellipsis", "Float", "FormattedString", "GeneratorExp", "IfExp", "Imaginary",
        "Integer", "Lambda", "List", "ListComp", "Name", "NamedExpr", "Set", "SetComp", "SimpleString",
        "StarredElement", "Subscript", "Tuple", "UnaryOperation",
    )
)  # fmt: skip

#: what to say about refused syntax (libcst class name -> explanation); unknown kinds get a generic message
SYNTAX_HINTS: dict[str, str] = {
    "ClassDef": "class definitions are not supported; use functions and dicts",
    "Global": "`global` is not supported; return values from functions instead",
    "Nonlocal": "`nonlocal` is not supported; return values from functions instead",
    "Import": "imports are not available; use the workflow API and the builtins",
    "ImportFrom": "imports are not available; use the workflow API and the builtins",
    "With": "`with` blocks are not supported",
    "Yield": "generators (`yield`) are not supported; build and return a list",
    "Await": "async code is not supported; use parallel(...) to run agents at once",
    "Match": "`match` is not supported; use if/elif",
    "TryStar": "`except*` is not supported",
    "AnnAssign": "annotated assignments are not supported; write `x = ...`",
    "TypeAlias": "type aliases are not supported",
    "Decorator": "decorators are not supported",
    "Asynchronous": "async code is not supported; use parallel(...) to run agents at once",
    "StarredDictComp": "this comprehension form is not supported",
    "TemplatedString": "template strings are not supported; use an f-string",
}

# ---- budgets -------------------------------------------------------------------------------------------

#: a script longer than this is refused (designer outputs are a few hundred tokens)
MAX_SCRIPT_CHARS = 12_000
MAX_SCRIPT_LINES = 400
#: deepest syntax nesting accepted (also protects the parsers from pathological inputs)
MAX_NESTING = 60

# ---- diagnostic codes (stable: recorded in rollouts and counted by the replay tool) ----------------------

CODES: dict[str, str] = {
    "E-TYPE": "the script is not text",
    "E-EMPTY": "the script is empty",
    "E-SIZE": "the script exceeds the size budget",
    "E-NESTING": "the script nests deeper than allowed",
    "E-SYNTAX": "the script is not valid Python",
    "E-UNSUPPORTED": "a statement or expression kind that scripts may not use",
    "E-IMPORT": "an import",
    "E-DUNDER": "a double-underscore name or attribute",
    "E-PRIVATE": "a name or attribute starting with an underscore",
    "E-ATTR": "an attribute that is not on the allow-list",
    "E-FORBIDDEN": "a builtin that scripts may not use (exec, eval, open, getattr, ...)",
    "E-NAME": "a name that is never defined",
    "E-SHADOW": "rebinding a name of the workflow API, a builtin or a tool",
    "E-NO-AGENT": "the script never calls an agent",
    "E-CHECKER": "the checker itself failed (a bug: please report the script)",
    "W-NO-SUBMIT": "the script never calls submit()",
    "W-BARE-EXCEPT": "a bare `except:`",
}


def reserved_names(tool_names: tuple[str, ...] | list[str] = DEFAULT_TOOL_NAMES) -> frozenset[str]:
    """Names a script may read but never rebind."""
    return frozenset(
        API_NAMES
        + (TASK_NAME,)
        + SAFE_BUILTINS
        + SAFE_CONSTANTS
        + SAFE_EXCEPTIONS
        + SPECIAL_NAMES
        + tuple(tool_names)
    )
