"""Reading what triage sends: one check of type, shape and tenant for every incoming message."""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError

from ira.core.envelope import Envelope
from ira.core.errors import InvalidMessageError
from ira.core.model import Model

M = TypeVar("M", bound=Model)


def parse_message(envelope: Envelope, model: type[M], *, message_type: str, what: str, topic: str) -> M:
    """The envelope's payload as ``model``, or InvalidMessageError (poison: it goes to the DLQ)."""
    if envelope.type != message_type:
        raise InvalidMessageError(f"unexpected message type {envelope.type!r} on the {topic} topic")
    try:
        parsed = model.model_validate(envelope.payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidMessageError(f"{what} {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
    if getattr(parsed, "tenant_id", None) != envelope.tenant_id:
        raise InvalidMessageError(f"{what} tenant differs from the envelope's")
    return parsed
