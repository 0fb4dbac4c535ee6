"""The Dockerfile read as data: its stages, what each copies, installs and sets in the environment, and as whom it runs,
so the tests that mimic the image follow the file instead of a second copy of it."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


@dataclass(frozen=True)
class Stage:
    name: str
    lines: list[str]  # its own instructions, line continuations joined, comments left out
    parent: Stage | None = None  # the stage it is built FROM, where that is a stage of the file

    @property
    def base_image(self) -> str:
        """The image the stage starts from, through the stages it is built on."""
        return self.parent.base_image if self.parent else self.lines[0].split()[1]

    @property
    def is_image(self) -> bool:
        """A stage built to run (it has an entry point), not one the others are built on."""
        return bool(self.instructions("ENTRYPOINT"))

    def instructions(self, keyword: str) -> list[str]:
        """The arguments of every `keyword` instruction, in order: the stage's own after those it inherits."""
        prefix = keyword.upper() + " "
        inherited = self.parent.instructions(keyword) if self.parent else []
        return inherited + [line[len(prefix) :].strip() for line in self.lines if line.upper().startswith(prefix)]

    def env(self) -> dict[str, str]:
        """The environment the stage's ENV instructions set (KEY=VALUE form)."""
        found: dict[str, str] = {}
        for args in self.instructions("ENV"):
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                found[key] = value
        return found

    def copies(self) -> list[tuple[list[str], str]]:
        """(sources, destination) of every COPY from the build context."""
        return [(parts[:-1], parts[-1]) for parts in (shlex.split(a) for a in self.instructions("COPY"))]

    def workdir(self) -> str:
        return self.instructions("WORKDIR")[-1]

    def user(self) -> str:
        return self.instructions("USER")[-1]

    def volumes(self) -> list[str]:
        found: list[str] = []
        for args in self.instructions("VOLUME"):
            found.extend(shlex.split(args.strip("[]").replace(",", " ")))
        return found

    def make_install(self) -> dict[str, str]:
        """The variables of the stage's `make install` step (EXTRAS, SYNC_FLAGS, ...)."""
        for args in self.instructions("RUN"):
            match = re.search(r"make install((?:\s+\w+=(?:\"[^\"]*\"|\S+))*)", args)
            if match:
                return dict(pair.split("=", 1) for pair in shlex.split(match.group(1)))
        raise AssertionError(f"stage {self.name} has no `make install` step")


def stages(path: Path = DOCKERFILE) -> dict[str, Stage]:
    """Instructions per named stage."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    result: dict[str, Stage] = {}
    current: Stage | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)\s+AS\s+([\w.-]+)", line, re.I)
        if match:
            current = Stage(match.group(2), [line], result.get(match.group(1)))
            result[current.name] = current
        elif current:
            current.lines.append(line)
    return result
