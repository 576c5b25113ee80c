"""The test API server's credentials: a CA and serving certificate, the service-account signing
keys, the static token file and the kubeconfigs of its two identities.

The admin (``devicestate-admin`` in ``system:masters``), the service identity
``system:serviceaccount:devicestate:devicestate``, which has no RBAC rights until a test grants
some, and the control plane's own users (``system:kube-scheduler``,
``system:kube-controller-manager``: what the bootstrap RBAC grants to). Everything is generated anew for every start (``openssl`` on the PATH).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from devtools.stack.supervisor import HOST
from devtools.testenv.errors import KubeAPIError

SERVICE_NAMESPACE = "devicestate"
SERVICE_ACCOUNT = "devicestate"
SERVICE_USER = f"system:serviceaccount:{SERVICE_NAMESPACE}:{SERVICE_ACCOUNT}"
SERVICE_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{SERVICE_NAMESPACE}",
    "system:authenticated",
)
ADMIN_USER = "devicestate-admin"
ADMIN_GROUPS = ("system:masters",)
# The users Kubernetes' bootstrap RBAC binds the system:kube-scheduler and
# system:kube-controller-manager ClusterRoles to (kubeadm gives them client certificates).
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise KubeAPIError("`openssl` is not on the PATH: it makes the test certificates and keys")
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise KubeAPIError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def make_pki(directory: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, and the service-account
    signing key pair (all ECDSA P-256, generated anew for every start)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "serving.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName=IP:{HOST},DNS:localhost\n"
    )
    new_key = "genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out"
    steps = [
        f"{new_key} ca.key",
        "req -x509 -new -key ca.key -subj /CN=devicestate-testenv-ca -days 3650"
        " -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign -out ca.crt",
        f"{new_key} serving.key",
        "req -new -key serving.key -subj /CN=kube-apiserver -out serving.csr",
        "x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650"
        " -extfile serving.ext -out serving.crt",
        f"{new_key} service-account.key",
        "pkey -in service-account.key -pubout -out service-account.pub",
    ]
    for step in steps:
        _openssl(*step.split(), cwd=directory)
    for key in directory.glob("*.key"):
        key.chmod(0o600)


def write_token_file(
    path: Path, admin_token: str, service_token: str, users: Mapping[str, str] | None = None
) -> None:
    """kube-apiserver's ``--token-auth-file``: token,user,uid,"group1,group2"; ``users`` adds
    user -> token lines without groups (the server adds ``system:authenticated``)."""
    lines = [
        f'{admin_token},{ADMIN_USER},devicestate-admin-uid,"{",".join(ADMIN_GROUPS)}"',
        f'{service_token},{SERVICE_USER},devicestate-service-uid,"{",".join(SERVICE_GROUPS)}"',
        *(f"{token},{user},{user.replace(':', '-')}-uid" for user, token in (users or {}).items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> None:
    """A kubeconfig (JSON, which is YAML too) with the CA inline, so the file stands alone."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devicestate-testenv",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": f"devicestate-testenv-{user}",
                "context": {"cluster": "devicestate-testenv", "user": user},
            }
        ],
        "current-context": f"devicestate-testenv-{user}",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
