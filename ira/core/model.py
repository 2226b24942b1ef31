"""The base every boundary model inherits from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """Base for every model that crosses a boundary: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
