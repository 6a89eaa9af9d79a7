"""ACL 1.0 request signing (AclClientRPCHook): HMAC-SHA1 over the sorted header values and the body."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from .protocol.frame import RemotingCommand


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never print the secret
        return f"Credentials(access_key={self.access_key!r}, secret_key=***)"


def signature(fields: dict[str, str], body: bytes, secret_key: str) -> str:
    content = "".join(v for k, v in sorted(fields.items()) if k != "Signature").encode() + body
    return base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()


def sign(cmd: RemotingCommand, credentials: Credentials) -> None:
    """Add AccessKey (and SecurityToken) and a Signature over exactly the fields being sent."""
    fields = cmd.ext_fields
    fields["AccessKey"] = credentials.access_key
    if credentials.security_token:
        fields["SecurityToken"] = credentials.security_token  # Java signs it; the Go client does not
    fields["Signature"] = signature(fields, cmd.body, credentials.secret_key)
