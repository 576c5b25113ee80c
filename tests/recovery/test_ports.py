"""The executor's port to the Kubernetes API (``recovery.kube.KubeObjects``): the in-memory fake
and the real adapter (``services.adapters.kube.objects``) implement it member by member."""

from __future__ import annotations

import pytest

from services.adapters.kube.objects import KubernetesObjects
from services.processes.recovery.kube import KubeObjects
from tests.fakes.kube_objects import FakeKube
from tests.ports import port_mismatches


@pytest.mark.parametrize(
    "implementation", [FakeKube, KubernetesObjects], ids=lambda value: value.__name__
)
def test_fake_and_real_implement_the_port(implementation: type) -> None:
    assert port_mismatches(implementation, KubeObjects) == []


def test_the_fake_is_the_port_for_mypy() -> None:
    # Annotated as the port: mypy, when it reads the tests, checks it statically too.
    objects: KubeObjects = FakeKube()
    assert callable(objects.delete_job)
