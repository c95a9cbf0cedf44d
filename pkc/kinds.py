"""The base of pkc's kind enumerations (issue 15: kinds are enums, not strings).

A kind's value is the string it has always been printed as (IR attributes, JSON
metadata, remarks, file names), so a :class:`Kind` member formats, compares and serializes
exactly as that string did; code compares members (``k is SiteKind.WAIT``), and every
place that reads a kind from text converts it once with :meth:`Kind.parse`.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """A string-valued enumeration whose bad values are reported by name."""

    @classmethod
    def parse(cls, value, what: str):
        """``value`` (read from IR, JSON or an option) as a member; a ValueError naming
        ``what``, the bad value and the valid ones otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{what}: {value!r} is not a valid {cls.__name__} (one of "
                             f"{', '.join(repr(m.value) for m in cls)})") from None
