"""Raw REST on the test API server for the deploy and live-watcher tests: server-side apply of any
manifest (paths found by discovery, as kubectl does), SubjectAccessReviews, ServiceAccount tokens
(TokenRequest) written as kubeconfigs, and the etcd v3 HTTP/JSON gateway (revision, compaction).

aiohttp directly, not the generated client: manifests are plain dicts of any kind, and the
``Warning`` headers of an answer (deprecations, Pod Security) are part of what the tests check.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from devtools.testenv import kubeapi

FIELD_MANAGER = "devicestate-tests"


class KubeError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)[:500]
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status = status
        self.body = body


@dataclass
class Answer:
    status: int
    body: Any
    warnings: list[str] = field(default_factory=list)


def load_manifests(text: str) -> list[dict[str, Any]]:
    """Every non-empty document of a YAML stream (what ``kustomize build`` prints)."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def object_ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


class KubeREST:
    """One aiohttp session on ``api`` with a bearer ``token`` (default: the admin's)."""

    def __init__(self, api: kubeapi.KubeAPI, token: str | None = None) -> None:
        self.api = api
        self._token = token or api.admin_token
        self._ssl = ssl.create_default_context(cafile=str(api.ca_file))
        self._session: aiohttp.ClientSession | None = None
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    async def __aenter__(self) -> KubeREST:
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201),
    ) -> Answer:
        assert self._session is not None, "use `async with KubeREST(...)`"
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._session.request(
            method,
            self.api.server_url + path,
            data=data,
            params=params,
            headers=headers,
            ssl=self._ssl,
        ) as response:
            text = await response.text()
            try:
                parsed: Any = json.loads(text) if text else None
            except json.JSONDecodeError:
                parsed = text
            answer = Answer(response.status, parsed, list(response.headers.getall("Warning", [])))
        if answer.status not in ok:
            raise KubeError(answer.status, answer.body, f"{method} {path}")
        return answer

    # --- discovery and paths -------------------------------------------------------------------
    async def _kinds(self, api_version: str) -> dict[str, tuple[str, bool]]:
        """kind -> (plural, namespaced) of one group/version, from discovery (cached)."""
        if api_version not in self._resources:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            listing = (await self.request("GET", path)).body
            self._resources[api_version] = {
                r["kind"]: (r["name"], bool(r["namespaced"]))
                for r in listing["resources"]
                if "/" not in r["name"]  # subresources
            }
        return self._resources[api_version]

    async def path(self, obj: dict[str, Any], *, named: bool = True) -> str:
        """The REST path of ``obj`` (``named``: the object itself, else its collection)."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        kinds = await self._kinds(api_version)
        if kind not in kinds:
            raise KubeError(404, f"{kind} is not served at {api_version}", object_ref(obj))
        plural, namespaced = kinds[kind]
        prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj.get("metadata") or {}
        if namespaced:
            if not meta.get("namespace"):
                raise ValueError(f"{object_ref(obj)}: a namespaced object without namespace")
            prefix += f"/namespaces/{meta['namespace']}"
        path = f"{prefix}/{plural}"
        return f"{path}/{meta['name']}" if named else path

    # --- writes --------------------------------------------------------------------------------
    async def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, ok: tuple[int, ...] = (200, 201)
    ) -> Answer:
        """Server-side apply (``kubectl apply --server-side --force-conflicts``), optionally
        ``dryRun=All``: admission and validation run, nothing is stored."""
        # Strict: an unknown or duplicate field is an error, not a warning.
        params = {"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            params["dryRun"] = "All"
        return await self.request(
            "PATCH",
            await self.path(obj),
            body=obj,
            params=params,
            content_type="application/apply-patch+yaml",
            ok=ok,
        )

    async def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> Answer:
        params = {"fieldValidation": "Strict"}
        if dry_run:
            params["dryRun"] = "All"
        return await self.request(
            "POST", await self.path(obj, named=False), body=obj, params=params
        )

    # --- authorization -------------------------------------------------------------------------
    async def can(
        self,
        user: str,
        groups: list[str],
        verb: str,
        resource: str,
        *,
        group: str = "",
        namespace: str = "",
        subresource: str = "",
        name: str = "",
    ) -> bool:
        """A SubjectAccessReview: may ``user`` (with ``groups``) do it? ``namespace`` empty: in
        all namespaces (cluster-wide list/watch) or a cluster-scoped resource."""
        attributes = {
            "verb": verb,
            "group": group,
            "resource": resource,
            "namespace": namespace,
            "subresource": subresource,
            "name": name,
        }
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {k: v for k, v in attributes.items() if v},
            },
        }
        answer = await self.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review
        )
        return bool(answer.body["status"].get("allowed"))

    async def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path, seconds: int = 3600
    ) -> Path:
        """A kubeconfig for the ServiceAccount ``namespace/name`` (which must exist): a token
        from the TokenRequest API, what kubelet mounts into its Pods."""
        answer = await self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        token = answer.body["status"]["token"]
        return write_kubeconfig(self.api, f"system:serviceaccount:{namespace}:{name}", token, path)


def write_kubeconfig(api: kubeapi.KubeAPI, user: str, token: str, path: Path) -> Path:
    """A kubeconfig for ``api`` with a bearer ``token`` (the CA inline), mode 0600."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testenv",
                "cluster": {
                    "server": api.server_url,
                    "certificate-authority-data": base64.b64encode(
                        api.ca_file.read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "testenv", "user": user}}],
        "current-context": user,
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


IDENTITY_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)


def identities(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Namespaces, ServiceAccounts and RBAC objects of a render, in an order that can be
    created."""
    return sorted(
        (m for m in manifests if m["kind"] in IDENTITY_KINDS),
        key=lambda m: IDENTITY_KINDS.index(m["kind"]),
    )


async def apply_identities(rest: KubeREST, manifests: list[dict[str, Any]]) -> None:
    """Create (server-side apply, for real) the Namespace, ServiceAccounts and RBAC of a render."""
    for obj in identities(manifests):
        await rest.apply(obj)


async def wait_until_allowed(
    rest: KubeREST,
    account: str,
    verb: str,
    resource: str,
    *,
    namespace_of_account: str = "devicestate",
    **attributes: str,
) -> None:
    """Until a SubjectAccessReview for the ServiceAccount ``account`` says yes: the RBAC
    authorizer sees objects just created through an informer, a moment later."""
    user, groups = service_account_user(namespace_of_account, account)
    for _ in range(200):
        if await rest.can(user, groups, verb, resource, **attributes):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{account} still may not {verb} {resource} {attributes} after 20 s")


def service_account_user(namespace: str, name: str) -> tuple[str, list[str]]:
    """The user name and groups a ServiceAccount token authenticates as."""
    return (
        f"system:serviceaccount:{namespace}:{name}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    )


# --- etcd's v3 HTTP/JSON gateway (no etcdctl is built) -------------------------------------------
def _etcd(api: kubeapi.KubeAPI, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        api.etcd_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.loads(response.read())
    assert isinstance(answer, dict)
    return answer


def etcd_revision(api: kubeapi.KubeAPI) -> int:
    """etcd's current revision (what kube-apiserver calls resourceVersion)."""
    answer = _etcd(api, "/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})
    return int(answer["header"]["revision"])


def compact_etcd(api: kubeapi.KubeAPI, revision: int | None = None) -> int:
    """Compact etcd's history up to ``revision`` (default: the current one), as kube-apiserver's
    compactor does every 5 minutes; a WATCH from an older resourceVersion that reaches etcd is
    then answered 410 Expired. Returns the revision compacted to."""
    revision = etcd_revision(api) if revision is None else revision
    _etcd(api, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision
