"""The quoted-source fixtures (library messages, engines' phase evidence): every yaml file of a folder,
entry by entry, each with an id naming its file, its index and its library."""

from pathlib import Path

import yaml


def quoted_entries(folder: Path) -> list[dict]:
    entries = []
    for path in sorted(folder.glob("*.yaml")):
        for index, entry in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))):
            entries.append({**entry, "_id": f"{path.stem}-{index}-{entry['library']}"})
    return entries
