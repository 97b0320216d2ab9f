"""A minimal RoyaleFleet extension: one config section, ``curiosity``, for the tests.

Installed the way pip installs a package, minus the copy: the folder above holds this package
and its ``.dist-info`` (METADATA and entry_points.txt), so putting that folder on sys.path is an
installation as far as ``importlib.metadata`` can tell.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__version__ = "0.3.1"


class CuriositySection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An intrinsic-reward bonus's settings: ``scale`` (>= 0) and ``horizon`` (decisions, >= 1)."""

    scale: Annotated[float, msgspec.Meta(ge=0.0)] = 0.01
    horizon: Annotated[int, msgspec.Meta(ge=1)] = 32
