"""Turning a SQL row into a view model: only the columns the view declares."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

V = TypeVar("V", bound=BaseModel)


def view_of(model: type[V], row: Any, **extra: Any) -> V:
    """``model`` from the row's columns it names, plus ``extra`` fields computed by the caller."""
    mapping = row._mapping if hasattr(row, "_mapping") else row
    return model.model_validate({k: v for k, v in mapping.items() if k in model.model_fields} | extra)
