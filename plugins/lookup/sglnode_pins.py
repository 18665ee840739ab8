"""Lookup plugin: a value of tools/sglnode/pins.yaml, the repository's one place for pinned versions
and the node's hardware facts.

    {{ lookup('sglnode_pins', 'sglang') }}            -> the pinned SGLang version
    {{ lookup('sglnode_pins', 'gpu.compute_capability') }}
    {{ lookup('sglnode_pins', 'sglang_image') }}      derived values too (tools/sglnode/pins.py)
    {{ lookup('sglnode_pins') }}                      every value, as a mapping

Role defaults read their pinned values through it, so a bump is one line in pins.yaml. It loads
tools/sglnode/pins.py by path (next to this repository's roles), never the installed sglnode package,
so it reads this checkout's pins whichever sglnode the controller has installed.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglnode_pins
short_description: a value of tools/sglnode/pins.yaml (pinned versions and the node's hardware facts)
description:
  - Returns the value of each dotted key (e.g. C(sglang), C(gpu.sm), C(ports.router)); without a key,
    every value as one mapping. Derived values (C(sglang_image), C(cuda_tag), C(gpu.cuda_arch)) included.
options:
  _terms:
    description: dotted keys
    required: false
"""

RETURN = r"""
_raw:
  description: the values, in the order of the keys
  type: list
"""

import importlib.util
import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

PINS_MODULE = Path(__file__).resolve().parents[2] / "tools" / "sglnode" / "pins.py"


MODULE_NAME = "_sglnode_pins_lookup"


def _pins_module() -> Any:
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, PINS_MODULE)
    if spec is None or spec.loader is None:
        raise AnsibleLookupError(f"sglnode_pins: cannot load {PINS_MODULE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE_NAME]
        raise
    return module


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[Any]:
        module = _pins_module()
        try:
            values = module.load()
            if not terms:
                return [values.to_dict()]
            return [values.get(str(term)) for term in terms]
        except module.PinsError as exc:
            raise AnsibleLookupError(f"sglnode_pins: {exc}") from exc
