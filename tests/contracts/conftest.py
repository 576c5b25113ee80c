"""The test kube-apiserver's session fixtures (``tests/kubeapi``'s harness) for the suites of
the Kubernetes ports. PostgreSQL fixtures (``engine``, ``fresh_schema``...) come from
``tests/conftest.py``."""

from __future__ import annotations

# A second API server when tests/kubeapi runs in the same session (as tests/recovery does).
from tests.kubeapi import conftest as harness

kube_api = harness.kube_api
admin_client = harness.admin_client
