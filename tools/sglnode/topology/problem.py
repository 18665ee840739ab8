"""One reason a topology (or a preset) is rejected: where (server and field) and what to change."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One reason a topology is rejected: where (server and field) and what to change."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"where": self.where, "message": self.message}
