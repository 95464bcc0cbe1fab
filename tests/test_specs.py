"""The one PREFIX:NAME?k=v parser behind task specs and model specs: the same rules for both."""

from __future__ import annotations

import pytest

from harnesslearn.errors import UserError
from harnesslearn.models.common import split_spec
from harnesslearn.specs import Spec, parse_spec
from harnesslearn.tasks import parse_spec as parse_task_spec


def test_prefix_name_and_options() -> None:
    assert parse_spec("python:/tmp/m.py:fn") == Spec("python", "/tmp/m.py:fn", {})  # the name keeps its ':'
    assert parse_spec(" OpenAI:org/m?timeout=5&x=a%20b ") == Spec("openai", "org/m", {"timeout": "5", "x": "a b"})


@pytest.mark.parametrize("bad,why", [("", "empty"), ("noprefix", "needs a prefix"), (":x", "needs a prefix"),
                                     ("a:b?k", "key=value"), ("a:b?k=1&k=2", "given twice"), ("a:b?=1", "no name")])
def test_the_same_mistakes_are_refused_for_tasks_and_models(bad: str, why: str) -> None:
    for parse in (parse_spec, split_spec, parse_task_spec):
        with pytest.raises(UserError, match=why):
            parse(bad)


def test_tasks_type_the_values_models_keep_strings() -> None:
    assert parse_task_spec("rg:fam?a=3&b=true")[2] == {"a": 3, "b": True}
    assert split_spec("hf:m?max_batch=3&static_cache=true")[2] == {"max_batch": "3", "static_cache": "true"}
