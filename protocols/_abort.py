"""What a client tells the server when it aborts: a fixed reason code, never the error's text.

An error message can hold private values (the first out-of-bound entry and its index, NaN positions,
a non-integral count), so the wire :class:`~securefgl.protocols.messages.Abort` carries only the error
class and a constant code from :data:`ABORT_CODES`; the full message stays in the client's local log
(and in the client object's ``error``).
"""

from __future__ import annotations

from securefgl.errors import (
    EncodingError,
    InconsistentViewError,
    InvalidMessage,
    MalformedMessageError,
    OverflowRiskError,
    ProtocolError,
    ReleaseRefusedError,
    RequestRefusedError,
    StageOrderError,
    ThresholdError,
)
from securefgl.protocols.messages import Abort

__all__ = ["ABORT_CODES", "abort_code", "abort_message"]

#: Error class -> the fixed code a client sends (most specific class first).
ABORT_CODES: tuple[tuple[type[Exception], str], ...] = (
    (OverflowRiskError, "overflow-risk"),
    (EncodingError, "input-rejected-by-schema"),
    (RequestRefusedError, "request-refused"),
    (InconsistentViewError, "inconsistent-view"),
    (ThresholdError, "below-threshold"),
    (ReleaseRefusedError, "release-refused"),
    (StageOrderError, "stage-order"),
    (MalformedMessageError, "malformed-request"),
    (InvalidMessage, "invalid-message"),
    (ProtocolError, "protocol-error"),
)


def abort_code(exc: BaseException) -> str:
    """The fixed reason code of ``exc`` (``"protocol-error"`` for anything unlisted)."""
    for cls, code in ABORT_CODES:
        if isinstance(exc, cls):
            return code
    return "protocol-error"


def abort_message(exc: BaseException) -> bytes:
    """The wire Abort for ``exc``: its class name and fixed code, no message text."""
    return Abort(reason=type(exc).__name__, detail=abort_code(exc)).to_bytes()
