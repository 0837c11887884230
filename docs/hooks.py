"""MkDocs hook: the docstrings' Sphinx roles (:class:`X`, :func:`f`) read as plain code.

The package's docstrings cross-reference with Sphinx roles, which mkdocstrings renders as the
role's name beside the code (":class: X"); the API pages show the code alone.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const|ref):(?=<code>|`)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub("", html)
