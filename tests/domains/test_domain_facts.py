"""What the rest of the project asks of a domain comes from its record (metaagent/domain.py):
serve's accepted domains and guess, eval's template twins, whether answers are programs."""

from __future__ import annotations

import pydantic
import pytest

from metaagent.domain import get_domain, guess_domain, served_domains
from metaagent.serve.protocol import TeamOptions


def test_serve_accepts_the_served_domains_by_name_and_names_them_otherwise():
    assert served_domains() == ("code", "math")
    assert TeamOptions(domain="code").domain == "code"
    with pytest.raises(pydantic.ValidationError, match=r"unknown domain 'plan'; this server accepts \['code', 'math'\]"):
        TeamOptions(domain="plan")
    assert guess_domain("Write a function that adds two numbers.") == "code"
    assert guess_domain("What is 2 + 3?") == "math"


def test_template_twins_and_program_answers_are_domain_facts():
    assert get_domain("code").twin("single_math") == "single_code"
    assert get_domain("math").twin("reflection_code") == "reflection"
    assert get_domain("qa").twin("single_math") is None
    assert get_domain("code").runs_code and not get_domain("math").runs_code
    assert get_domain("math").boxed_answer and not get_domain("qa").boxed_answer
