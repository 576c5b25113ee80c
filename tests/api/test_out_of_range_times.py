"""A time with an offset that has no UTC form (``9999-12-31T23:59:59-14:00`` is in year 10000
in UTC, ``0001-01-01T00:00:00+14:00`` in year 0) is a 422 with a message, never the 500 of the
``OverflowError`` that converting it raises: ``checkpointAt`` of a migration report,
``collectedAt`` of an evidence body, ``expiresAt`` of a quarantine."""

from __future__ import annotations

from typing import Any

import httpx
import pydantic
import pytest
from pydantic import TypeAdapter

from services.processes.api.schemas_governance import ExpiryIn
from services.processes.api.schemas_migration_evidence import MigrationEvidenceIn
from services.processes.api.schemas_migrations import MigrationReportIn
from tests.api.conftest import bearer

NO_UTC_FORM = ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00")


def _refused(validate: Any, body: dict[str, Any], field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        validate(body)
    [error] = info.value.errors()
    assert error["loc"][-1] == field and "out of range" in error["msg"], error


@pytest.mark.parametrize("at", NO_UTC_FORM)
def test_a_checkpoint_time_without_a_utc_form_is_a_validation_error(at: str) -> None:
    report = {
        "kind": "checkpoint-committed",
        "holder": "exec-a",
        "fencingToken": 1,
        "checkpointID": "ckpt-1",
        "checkpointAt": at,
    }
    _refused(TypeAdapter(MigrationReportIn).validate_python, report, "checkpointAt")


@pytest.mark.parametrize("at", NO_UTC_FORM)
def test_an_evidence_time_without_a_utc_form_is_a_validation_error(at: str) -> None:
    pod = {"namespace": "ml", "name": "infer-0", "uid": "u-1", "status": {}}
    evidence = {"holder": "exec-a", "collectedAt": at, "pods": [pod]}
    _refused(MigrationEvidenceIn.model_validate, evidence, "collectedAt")


@pytest.mark.parametrize("at", NO_UTC_FORM)
def test_an_expiry_without_a_utc_form_is_a_validation_error(at: str) -> None:
    _refused(ExpiryIn.model_validate, {"reason": "rma", "expiresAt": at}, "expiresAt")


def test_in_range_times_are_converted_to_utc() -> None:
    pod = {"namespace": "ml", "name": "infer-0", "uid": "u-1", "status": {}}
    body = {"holder": "exec-a", "collectedAt": "2026-12-03T14:00:05+02:00", "pods": [pod]}
    assert MigrationEvidenceIn.model_validate(body).collected_at.isoformat() == (
        "2026-12-03T12:00:05+00:00"
    )


@pytest.mark.integration
async def test_a_quarantine_expiry_without_a_utc_form_is_422_not_500(
    gov_api: httpx.AsyncClient,
) -> None:
    body = {"node": "gpu-node-a", "resourceID": "GPU-0", "reason": "XID 79"}
    for at in NO_UTC_FORM:
        response = await gov_api.post(
            "/v1/quarantines", json={**body, "expiresAt": at}, headers=bearer("operator")
        )
        assert response.status_code == 422, response.text
        assert "expiresAt" in response.json()["detail"] and "out of range" in response.text
