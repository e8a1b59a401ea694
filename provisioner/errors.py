"""Error types shared by the commands; each maps to an exit code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputProblem:
    """One thing wrong with the user's input: where it is and what is wrong."""

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        location = f"{self.file}: {self.key}" if self.key else self.file
        return f"{location}: {self.message}"


class InputError(Exception):
    """Bad input (exit code 2): nothing was run on any host."""

    def __init__(self, problems: list[InputProblem]):
        self.problems = problems
        super().__init__("\n".join(str(problem) for problem in problems))


class LockHeldError(Exception):
    """Another apply/certify holds the inventory's lock."""
