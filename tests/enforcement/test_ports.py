"""The reconciler's port to the Kubernetes API (``enforcement.kube.TaintRuleApi``): the
in-memory fake and the real adapter (``services.adapters.kube.taint_rules``) implement it member
by member."""

from __future__ import annotations

import pytest

from services.adapters.kube.taint_rules import KubernetesTaintRules
from services.processes.enforcement.kube import TaintRuleApi
from tests.fakes.taint_rules import FakeTaintRules
from tests.ports import port_mismatches


@pytest.mark.parametrize(
    "implementation", [FakeTaintRules, KubernetesTaintRules], ids=lambda value: value.__name__
)
def test_fake_and_real_implement_the_port(implementation: type) -> None:
    assert port_mismatches(implementation, TaintRuleApi) == []


def test_the_fake_is_the_port_for_mypy() -> None:
    # Annotated as the port: mypy, when it reads the tests, checks it statically too.
    rules: TaintRuleApi = FakeTaintRules()
    assert callable(rules.delete_rule)
