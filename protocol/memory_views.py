"""What readers of memory need of an observation or a reflection, whatever row holds it.

A full record (``ObservationRecord``, ``ActiveReflection``) and a slim row read for one purpose both
satisfy these protocols, so the packer, the projector, the search answers and the Dropper each name
only what they use beyond this shared core.
"""

from __future__ import annotations

from typing import Protocol


class ObservationView(Protocol):
    """An observation as every reader shows it: id, date, relevance and text."""

    @property
    def observation_id(self) -> str: ...
    @property
    def timestamp(self) -> str: ...
    @property
    def relevance(self) -> str: ...
    @property
    def content(self) -> str: ...


class ReflectionView(Protocol):
    """A reflection as every reader shows it: id and text."""

    @property
    def reflection_id(self) -> str: ...
    @property
    def content(self) -> str: ...
