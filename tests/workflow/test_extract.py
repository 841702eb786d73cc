from __future__ import annotations

import pytest

from metaagent.workflow import extract_script

SCRIPT = 'solver = Agent("S", "p")\nsubmit(solver(task))\n'


@pytest.mark.parametrize(
    "text",
    [
        f"```python\n{SCRIPT}```",
        f"Here is my design.\n\n```python\n{SCRIPT}```\n\nThis uses one agent.",
        f"```py\n{SCRIPT}```",
        f"```Python3\n{SCRIPT}```",
        f"```\n{SCRIPT}```",
        f"Sure:\n```python\n{SCRIPT}",  # never closed (cut at max_tokens)
        f"```python\n{SCRIPT.rstrip()}```",  # closing fence glued to the last line
        f"python\n{SCRIPT}",  # a bare language line instead of a fence
        SCRIPT,  # no wrapping at all
        f"\r\n```python\r\n{SCRIPT.replace(chr(10), chr(13) + chr(10))}```\r\n",  # CRLF
        f"1. The team:\n    ```python\n    {SCRIPT.splitlines()[0]}\n    {SCRIPT.splitlines()[1]}\n    ```",  # indented
    ],
)
def test_extracts_the_script_from_usual_wrappings(text):
    assert extract_script(text) == SCRIPT


def test_prefers_the_block_that_is_a_workflow():
    text = f"Input looks like:\n```python\nx = [1, 2]\n```\nScript:\n```python\n{SCRIPT}```\nOutput:\n```text\n5\n```"
    assert extract_script(text) == SCRIPT


def test_last_workflow_block_wins():
    other = SCRIPT.replace('"S"', '"T"')
    assert extract_script(f"```python\n{SCRIPT}```\nbetter:\n```python\n{other}```") == other


def test_non_python_fences_are_ignored_and_empty_gives_none():
    assert extract_script("```json\n{}\n```") == "```json\n{}\n```\n"  # no script block: the whole text
    assert extract_script("") is None
    assert extract_script("   \n  ") is None
    assert extract_script("```python\n```") is None
    assert extract_script(None) is None  # type: ignore[arg-type]
