"""Property tests over topology documents (hypothesis): random mappings, random keys and values, and
mutations of the shipped topologies. Whatever the document, `topology check` answers with exit code
0, 1 or 2 and no exception, and `topology render` writes every file or none.

Budget: explicit max_examples and deadlines keep the whole module well under a minute.
"""

import contextlib
import copy
import io
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from sglnode.cli import main
from sglnode.topology import check_topology, read_topology_file
from sglnode.topology.schema import ServerDoc, TopologyDoc

REPO = Path(__file__).resolve().parents[2]
# Hypothesis caches (its unicode tables) outside the tree; no example database (see SETTINGS).
set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / "sglnode-hypothesis"))
SHIPPED = {p.stem: read_topology_file(p) for p in sorted((REPO / "inventory" / "topologies").glob("*.yml"))}
KNOWN_KEYS = sorted(set(TopologyDoc.model_fields) | set(ServerDoc.model_fields))
SETTINGS = settings(
    max_examples=60,
    deadline=3000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    database=None,  # no .hypothesis/ directory in the tree; derandomize makes runs repeatable
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["", "0", "-1", "nixl", "prefill", "decode", "EAGLE", "fp8_e4m3", "a\nb", "../x"]),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
documents = st.dictionaries(keys, values, max_size=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


@st.composite
def mutated_shipped(draw):
    """A shipped topology with a few random edits: set, delete, rename a key (a typo), add a key."""
    data = copy.deepcopy(SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(data) if p]
        path = draw(st.sampled_from(paths))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        action = draw(st.sampled_from(["set", "delete", "rename", "add"]))
        if action == "set":
            parent[last] = draw(values)
        elif action == "delete":
            if isinstance(parent, dict):
                del parent[last]
            else:
                parent.pop(last)
        elif action == "rename" and isinstance(parent, dict) and isinstance(last, str) and last:
            cut = draw(st.integers(min_value=0, max_value=len(last) - 1))
            parent[last[:cut] + last[cut + 1 :]] = parent.pop(last)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
    return data


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _yaml_text(document):
    # Some generated values (NaN keys, huge ints) are fine YAML; the file is what a user could write.
    return yaml.safe_dump(document, allow_unicode=True)


def check_and_render(document):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "topology.yml"
        path.write_text(_yaml_text(document), encoding="utf-8")
        code, _, _ = run("topology", "check", str(path), "--no-kernels")
        assert code in (0, 1, 2)
        out = Path(scratch) / "out"
        render_code, stdout, _ = run("topology", "render", str(path), "--out", str(out))
        files = sorted(p for p in out.rglob("*") if p.is_file()) if out.exists() else []
        if render_code == 0:
            topology, problems = check_topology(read_topology_file(path))
            assert problems == []
            written = [Path(line) for line in stdout.splitlines()]
            assert sorted(written) == sorted(f for f in files if f.name != ".sglnode-render.json")
            assert len(written) == len(topology.servers) + 3  # env files, 2 compose files, unit
        else:
            assert render_code in (1, 2)
            assert files == []  # none written


@SETTINGS
@given(documents)
def test_random_documents_never_crash_check_or_render(document):
    check_and_render(document)


@SETTINGS
@given(mutated_shipped())
def test_mutated_shipped_topologies_never_crash_and_render_all_or_nothing(document):
    check_and_render(document)


@SETTINGS
@given(st.binary(max_size=256) | st.text(max_size=256).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_arbitrary_bytes_are_a_message_and_exit_two_or_a_checked_mapping(raw):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "topology.yml"
        path.write_bytes(raw)
        code, out, err = run("topology", "check", str(path), "--no-memory", "--no-kernels")
        assert code in (0, 1, 2)
        assert (out + err).strip()  # always says something


@settings(max_examples=40, deadline=3000, derandomize=True, database=None)
@given(mutated_shipped())
def test_check_topology_reports_problems_it_does_not_raise(document):
    topology, problems = check_topology(document)
    assert all(p.where and p.message for p in problems)
    for server in topology.servers:
        assert server.mem_fraction_static is None or math.isfinite(server.mem_fraction_static)
