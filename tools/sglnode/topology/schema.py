"""Declared schemas of the files sglnode reads (pydantic), with problems that name the field and the fix.

Every mapping refuses keys it does not declare (`extra="forbid"`) and suggests the nearest declared
one, so a misspelled `mem_fracton_static` is an error instead of a setting silently left out.
Types are strict (`"4"` is not 4, `true` is not 1) and numbers finite. Ranges that say something
about SGLang (ports, fractions, TP times DP) stay in check.py with their own messages; bounds here are
the ones no serving setup can exceed.

`validate_partial` validates a mapping and, instead of stopping at the first error, drops each field
that failed and validates again: the caller gets the fields that are good plus one Problem per bad
field, so a topology's every mistake is listed in one pass.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sglnode.topology.problem import Problem

# A server is on at most every GPU of a few dozen nodes; a node has at most a few dozen GPUs.
MAX_SERVERS = 256
MAX_NODES = 64
MAX_NODE_GPUS = 1024
# Tokens: well above any context a model has today (DeepSeek-V4: 1M), well below int overflow.
MAX_TOKENS = 1 << 30
MAX_STRING = 4096
MAX_MAPPING = 512
SUGGEST_CUTOFF = 0.6
# Control characters would end a line in an env file or a unit, and mean nothing in a path or name.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
REPR_LIMIT = 80


def short(value: Any) -> str:
    """repr() cut to a readable length: hostile input can be a megabyte long."""
    text = repr(value)
    return text if len(text) <= REPR_LIMIT else text[: REPR_LIMIT - 3] + "..."


def _plain_text(value: Any) -> Any:
    if isinstance(value, str) and CONTROL_CHARACTERS.search(value):
        raise ValueError(f"contains a control character (newline, tab, ...): {short(value)}")
    return value


def _scalar(value: Any) -> Any:
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        return value
    if isinstance(value, str):
        return _plain_text(value)
    raise ValueError(f"expected a string, number or true/false, got {short(value)}")


def _arg_value(value: Any) -> Any:
    """An SGLang flag's value: a scalar, a list of scalars (nargs), or null/false to leave it out."""
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) > MAX_MAPPING:
            raise ValueError(f"has more than {MAX_MAPPING} values")
        return [_scalar(v) for v in value]
    return _scalar(value)


Text = Annotated[str, BeforeValidator(_plain_text), Field(max_length=MAX_STRING)]
EnvValue = Annotated[Any, BeforeValidator(_scalar)]
ArgValue = Annotated[Any, BeforeValidator(_arg_value)]
EnvMap = Annotated[dict[str, EnvValue], Field(max_length=MAX_MAPPING)]
ArgMap = Annotated[dict[str, ArgValue], Field(max_length=MAX_MAPPING)]
Tokens = Annotated[int, Field(le=MAX_TOKENS)]


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class SpeculativeDoc(Doc):
    algorithm: Text | None = None
    num_steps: Annotated[int, Field(le=64)] | None = None
    eagle_topk: Annotated[int, Field(le=64)] | None = None
    num_draft_tokens: Annotated[int, Field(le=1024)] | None = None
    draft_model_path: Text | None = None


class ServerDoc(Doc):
    """One entry of `servers:` (after `server_defaults:` merged in), or `server_defaults:` itself."""

    name: Text | None = None
    role: Text | None = None
    node: Text | None = None
    nodes: Text | Annotated[list[Text], Field(max_length=MAX_NODES)] | None = None
    gpus: Annotated[list[int], Field(max_length=MAX_NODE_GPUS)] | None = None
    tp: int | None = None
    dp: int | None = None
    ep: int | None = None
    port: int | None = None
    bootstrap_port: int | None = None
    dist_init_port: int | None = None
    mem_fraction_static: float | None = None
    attention_backend: Text | None = None
    kv_cache_dtype: Text | None = None
    context_length: Tokens | None = None
    chunked_prefill_size: Tokens | None = None
    cuda_graph_max_bs_decode: Tokens | None = None
    num_continuous_decode_steps: Tokens | None = None
    transfer_backend: Text | None = None
    nccl_profile: Text | None = None
    speculative: SpeculativeDoc | None = None
    nccl: EnvMap | None = None
    env: EnvMap | None = None
    args: ArgMap | None = None


class NodeDoc(Doc):
    name: Text | None = None
    address: Text | None = None
    gpus: Annotated[int, Field(ge=1, le=MAX_NODE_GPUS)] | None = None


class ModelDoc(Doc):
    path: Text | None = None
    host_path: Text | None = None
    served_name: Text | None = None
    quantization: Text | None = None
    preset: Text | None = None
    weights_gb: Annotated[float, Field(gt=0, le=1e6)] | None = None


class RouterDoc(Doc):
    node: Text | None = None
    port: int | None = None
    prometheus_port: int | None = None
    policy: Text | None = None
    args: ArgMap | None = None


class TopologyDoc(Doc):
    """The top level of a topology file (servers are validated one by one, after defaults merge)."""

    name: Text | None = None
    description: Text | None = None
    model: dict[str, Any] | None = None
    nodes: Annotated[list[Any], Field(max_length=MAX_NODES)] | None = None
    network: Text | None = None
    nccl: EnvMap | None = None
    nccl_profile: Text | None = None
    server_defaults: dict[str, Any] | None = None
    servers: Annotated[list[Any], Field(max_length=MAX_SERVERS)] | None = None
    router: dict[str, Any] | None = None


D = TypeVar("D", bound=BaseModel)


def suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=SUGGEST_CUTOFF)
    if close:
        return f"did you mean '{close[0]}'?"
    return f"known fields: {', '.join(known)}"


def _fields_at(cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Declared fields of the (nested) model that holds loc's last part."""
    current: Any = cls
    for part in loc[:-1]:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        nested = [a for a in _annotation_models(field.annotation)]
        if not nested:
            return []
        current = nested[0]
    return list(current.model_fields)


def _annotation_models(annotation: Any) -> list[type[BaseModel]]:
    args = getattr(annotation, "__args__", None) or ()
    candidates = [annotation, *args]
    return [a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)]


def message(cls: type[BaseModel], error: Any) -> str:
    """A pydantic error as sglnode says it (the tests' wording of the old hand-written reader)."""
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    loc = tuple(error["loc"])
    if kind == "extra_forbidden":
        return f"unknown field; {suggest(str(loc[-1]), _fields_at(cls, loc))}"
    simple = {
        "int_type": "expected an integer",
        "int_from_float": "expected an integer",
        "float_type": "expected a number",
        "string_type": "expected a string",
        "bool_type": "expected true or false",
        "dict_type": "expected a mapping",
        "model_type": "expected a mapping",
        "model_attributes_type": "expected a mapping",
        "list_type": "expected a list",
        "finite_number": "must be a finite number",
    }
    if kind in simple:
        return f"{simple[kind]}, got {short(value)}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "greater_than": ("more than", "gt"),
        "less_than_equal": ("at most", "le"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}, got {short(value)}"
    if kind == "too_long":
        return f"has more than {ctx.get('max_length')} entries"
    if kind == "string_too_long":
        return f"is longer than {ctx.get('max_length')} characters"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    return f"{error['msg']}, got {short(value)}"


def _drop_path(data: dict[str, Any], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The part of loc to remove: the deepest mapping entry it names; a list is dropped whole."""
    path: list[Any] = []
    current: Any = data
    for part in loc:
        if not isinstance(current, dict) or part not in current:
            break
        path.append(part)
        current = current[part]
        if isinstance(current, list):
            break
    return tuple(path)


def _without(data: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    if not path:
        return data
    copy = dict(data)
    head, *rest = path
    if rest and isinstance(copy.get(head), dict):
        copy[head] = _without(copy[head], tuple(rest))
    else:
        copy.pop(head, None)
    return copy


def validate_partial(
    cls: type[D], data: dict[str, Any], where: Callable[[tuple[Any, ...]], str]
) -> tuple[D, dict[str, Any], list[Problem]]:
    """(the validated model, the data it was validated from, a Problem per bad field)."""
    problems: list[Problem] = []
    for _ in range(8):  # each pass removes at least one field; nesting is two levels
        try:
            return cls.model_validate(data), data, problems
        except ValidationError as exc:
            dropped: set[tuple[Any, ...]] = set()
            for error in exc.errors():
                loc = tuple(error["loc"])
                if error["type"] == "missing":
                    problems.append(Problem(where(loc), "is required"))
                    continue
                path = _drop_path(data, loc)
                if not path or path in dropped:
                    continue
                dropped.add(path)
                text = message(cls, error)
                if len(loc) > len(path) and isinstance(loc[len(path)], int):
                    text = f"item {loc[len(path)]}: {text}"
                problems.append(Problem(where(path), text))
            if not dropped:
                break
            for path in dropped:
                data = _without(data, path)
    # Only a required field can be left failing; the caller reports the problems and uses nothing.
    return cls.model_construct(), {}, problems
