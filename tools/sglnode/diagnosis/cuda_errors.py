"""A CUDA error printed by its name is read with the runtime's text for it.

Libraries print a CUDA error three ways: by its text ("CUDA error: no kernel image is available for
execution on the device", torch, TensorRT-LLM), by its name and text (cupy, cudarc, DeepGEMM), or by
its name alone (numba's "Call to cuLaunchKernel results in CUDA_ERROR_NO_BINARY_FOR_GPU", a
cuda-python return code). The families' rules and words know the texts; `glossed` appends, in
torch's words ("CUDA error: <text>"), the text of each name a line carries alone, so the three read
the same (cuda_errors.yaml, the runtime's own table).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

TABLE = Path(__file__).with_name("cuda_errors.yaml")
NAME_RE = re.compile(r"\b(?:CUDA_ERROR_[A-Z0-9_]+|cudaError[A-Z]\w*)\b")
# Not glossed: out of memory. The OOM rules know both names, and they refuse the one that a
# TensorFlow/JAX host allocation prints ("failed to alloc N bytes on host: CUDA_ERROR_OUT_OF_MEMORY");
# its text beside it would read as a GPU's.
NOT_GLOSSED = frozenset({2})


@cache
def texts() -> dict[str, str]:
    """Each runtime and driver name -> the runtime's text for its code."""
    by_name: dict[str, str] = {}
    for row in yaml.safe_load(TABLE.read_text(encoding="utf-8")):
        if row["code"] in NOT_GLOSSED:
            continue
        for name in (row["runtime"], row["driver"]):
            if name:
                by_name[name] = row["text"]
    return by_name


def glossed(text: str) -> str | None:
    """`text` with the runtime's text after it for each CUDA error name it carries without that
    text, or None when there is nothing to add."""
    if "CUDA_ERROR_" not in text and "cudaError" not in text:
        return None
    known = texts()
    lowered = text.lower()
    added = []
    for name in dict.fromkeys(NAME_RE.findall(text)):
        meaning = known.get(name)
        if meaning and meaning.lower().rstrip(".") not in lowered and meaning not in added:
            added.append(meaning)
    if not added:
        return None
    # in torch's words for the same error, so what the rules make of those holds for a name too
    return text + "".join(f" (CUDA error: {meaning})" for meaning in added)
