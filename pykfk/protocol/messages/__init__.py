"""Declarations of the Kafka APIs pykfk speaks, one module per API.

``API_SPECS`` maps api key -> ApiSpec. The versions declared here are what the codec
can encode and decode; which of them the broker advertises is decided by the server's
dispatch table.
"""

from __future__ import annotations

from ..schema import ApiSpec
from . import api_versions

_MODULES = (api_versions,)

API_SPECS: dict[int, ApiSpec] = {m.SPEC.api_key: m.SPEC for m in _MODULES}

__all__ = ["API_SPECS", "ApiSpec"]
