"""Find the workflow script in a designer's raw reply.

Designers (and teachers) wrap the script the usual LLM ways: prose before and after, a ```python or ```py
fence, a fence that is never closed (generation cut at max_tokens), a bare leading ``python`` line, or no
fence at all. :func:`extract_script` undoes these and nothing more; whether the result is a valid script
is the checker's business.
"""

from __future__ import annotations

import textwrap

FENCE = "```"
#: fence languages that may hold the script ("" = a bare ``` fence)
SCRIPT_LANGUAGES = frozenset({"", "python", "py", "python3", "py3"})
#: a stray first line some models emit before the code when they drop the fence
LANGUAGE_LINES = frozenset({"python", "py", "python3", "python:"})
#: a block mentioning these is preferred over other blocks (e.g. an example of the task's input format)
SCRIPT_MARKERS = ("Agent(", "submit(")


def _fenced_blocks(lines: list[str]) -> list[tuple[str, list[str], bool]]:
    """(language, body lines, closed) of every fenced block, in order."""
    blocks: list[tuple[str, list[str], bool]] = []
    lang: str | None = None
    body: list[str] = []
    for line in lines:
        stripped = line.strip()
        if lang is None:
            at = line.find(FENCE)
            if at >= 0:
                words = line[at + len(FENCE) :].split()
                lang = words[0].lower() if words else ""
                body = []
            continue
        if stripped.startswith(FENCE):
            blocks.append((lang, body, True))
            lang = None
        elif stripped.endswith(FENCE):  # "submit(answer)```": the closing fence glued to the last line
            body.append(line.rstrip()[: -len(FENCE)])
            blocks.append((lang, body, True))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        blocks.append((lang, body, False))
    return blocks


def extract_script(text: str) -> str | None:
    """The script inside a designer reply: a fenced python block, else the whole text; None if empty.

    Among several fenced blocks, the last one that looks like a workflow (mentions ``Agent(`` or
    ``submit(``) wins, else the last python block. An unclosed fence runs to the end of the text.
    """
    if not isinstance(text, str):
        return None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks = [(body, closed) for lang, body, closed in _fenced_blocks(lines) if lang in SCRIPT_LANGUAGES]
    if blocks:
        bodies = ["\n".join(body) for body, _ in blocks]
        scripts = [b for b in bodies if any(m in b for m in SCRIPT_MARKERS)]
        code = (scripts or bodies)[-1]
    else:
        while lines and not lines[0].strip():
            lines.pop(0)
        if lines and lines[0].strip().lower() in LANGUAGE_LINES:
            lines.pop(0)
        code = "\n".join(lines)
    code = textwrap.dedent(code).strip("\n")
    return code + "\n" if code.strip() else None
