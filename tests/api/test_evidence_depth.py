"""An evidence body whose Pod ``status`` nests deeper than orjson encodes (254 levels: the
governance record is encoded with it) is a 422 with a message, not the 500 of orjson's
``TypeError: Recursion limit reached``; the request's JSON parser accepts about 1000 levels."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from services.processes.api.schemas_migration_evidence import MigrationEvidenceIn


def _nested(depth: int) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running"}
    for _ in range(depth - 1):
        status = {"a": [status]} if depth % 2 else {"a": status}
    return status


def _body(status: dict[str, Any]) -> dict[str, Any]:
    pod = {"namespace": "ml", "name": "infer-0", "uid": "u-1", "status": status}
    return {"holder": "exec-a", "collectedAt": "2026-12-03T12:00:05Z", "pods": [pod]}


@pytest.mark.parametrize("depth", [33, 300, 480])
def test_an_evidence_status_nested_too_deep_is_a_validation_error(depth: int) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        MigrationEvidenceIn.model_validate(_body(_nested(depth)))
    assert "deeper than 32 levels" in str(info.value)


def test_a_status_as_deep_as_the_limit_is_taken() -> None:
    assert MigrationEvidenceIn.model_validate(_body(_nested(32))).pods[0].status["a"]
