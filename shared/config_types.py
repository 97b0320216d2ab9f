"""The config's building blocks, apart from the schema so that a learner algorithm's declaration
(``shared/algorithms.py``) can define its config section without importing the schema that
lists it: the base of every config struct and the constrained number types."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

PosInt = Annotated[int, Meta(ge=1)]
NonNegInt = Annotated[int, Meta(ge=0)]
PosFloat = Annotated[float, Meta(gt=0.0)]
NonNegFloat = Annotated[float, Meta(ge=0.0)]
Fraction01 = Annotated[float, Meta(ge=0.0, le=1.0)]
Port = Annotated[int, Meta(ge=0, le=65535)]


class ConfigSection(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every config struct: unknown fields refused, keyword-only."""
