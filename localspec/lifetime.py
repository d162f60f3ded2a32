"""`Closing`: deterministic release of native resources through `close()` or `with`.

llama.cpp models and contexts hold hundreds of megabytes outside Python's heap; freeing them in
`__del__` would tie their release to the garbage collector, so owners close explicitly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class Closing(ABC):
    """A resource owner usable as a context manager that calls `close()` on exit."""

    @abstractmethod
    def close(self) -> None:
        """Release what the object owns; must be safe to call twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
