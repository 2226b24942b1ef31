"""The agents' redactor is the platform's one (:mod:`ira.core.redact`): applied to every
observation before it is stored or shown to a policy, so a log line that echoes a password
or an API key is evidence without the secret in it."""

from ira.core.redact import MASK, Redactor

__all__ = ["MASK", "Redactor"]
