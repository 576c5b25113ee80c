"""API bearer tokens as the deployment configures them: never the token, only its SHA-256.

An entry of ``DEVICESTATE_API_TOKENS`` (or of the file ``DEVICESTATE_API_TOKENS_FILE``) is
``{"name": ..., "role": "viewer|operator|admin", "sha256": <64 hex digits>}``. The API reads these
entries (:mod:`services.processes.api.auth`); ``devicestate token new|hash``
(:mod:`services.client.tokens`) makes them.
"""

from __future__ import annotations

import hashlib

from services.domain.governance.inputs import Role


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token (UTF-8), as ``api_tokens`` holds it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_entry(name: str, role: Role | str, token: str) -> dict[str, str]:
    """The ``api_tokens`` entry of ``token``.

    Raises ``ValueError`` when ``role`` is not one of the :class:`Role` values.
    """
    return {"name": name, "role": Role(role).value, "sha256": token_digest(token)}
