"""sglnode sim: flags, settings, startup lines and the ways it dies (in-process, no sockets)."""

import io

import pytest

from sglnode.cli import main
from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.pins import PINS
from sglnode.planning.planner import PHASE_CUDA_GRAPH, PHASE_KV_CACHE, PHASE_WEIGHTS
from sglnode.readiness import loglines
from sglnode.readiness.startup import ProgressTracker, Stage
from sglnode.sim.config import SimConfig, SimConfigError, build_config, parse_faults
from sglnode.sim.engine import SimEngine
from sglnode.sim.flags import build_sglang_parser, load_flag_table, strip_launcher
from sglnode.sim.log import SimLog
from sglnode.sim.main import crash_runtime, run_sim
from sglnode.sim.startup import Startup, StartupFailed, capture_batch_sizes, plan_for
from sglnode.upstream import catalog

FLASH = "deepseek-v4-flash-fp4"
RENDERED_ARGS = [
    "--model-path",
    "/models/DeepSeek-V4-Flash",
    "--served-model-name",
    "dsv4-flash",
    "--host",
    "127.0.0.1",
    "--port",
    str(PINS.ports.sglang),
    "--tp-size",
    "4",
    "--mem-fraction-static",
    "0.85",
    "--kv-cache-dtype",
    "fp8_e4m3",
    "--context-length",
    "131072",
    "--cuda-graph-max-bs-decode",
    "128",
    "--disaggregation-mode",
    "prefill",
    "--disaggregation-bootstrap-port",
    str(PINS.ports.bootstrap),
    "--enable-metrics",
    "--trust-remote-code",
]


@pytest.fixture(scope="module")
def parser():
    return build_sglang_parser()


def make_config(model=FLASH, gpu="rtx-pro-6000-blackwell", faults="", **args):
    flags = {"model_path": "/models/m", "tp_size": "4", "mem_fraction_static": "0.85", **args}
    return SimConfig(args=flags, gpu=gpu, model_preset=model, startup_s=0.0, faults=parse_faults(faults))


class Died(Exception):
    pass


def run_startup(config):
    """Run the startup sequence; returns (plan or None, phase or None, log text)."""
    stream = io.StringIO()

    def die():
        raise Died

    startup = Startup(config, SimLog(stream), sleep=lambda _s: None, die=die)
    try:
        return startup.run(), None, stream.getvalue()
    except Died:
        return None, "died", stream.getvalue()


# --- flags ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "prefix",
    [
        [],
        ["python3", "-m", "sglang.launch_server"],
        ["/usr/bin/python3", "-m", "sglang.launch_server"],
        ["-m", "sglang.launch_server"],
        ["sglang", "serve"],
    ],
)
def test_launcher_prefix_is_stripped(prefix):
    assert strip_launcher([*prefix, "--model-path", "m"]) == ["--model-path", "m"]


def test_rendered_sglang_flags_are_accepted(parser):
    args = parser.parse_args(RENDERED_ARGS)
    assert args.tp_size == "4"
    assert args.disaggregation_mode == "prefill"
    assert args.enable_metrics is True


def test_aliases_and_argparse_abbreviations_work_as_in_sglang(parser):
    args = parser.parse_args(["--model", "m", "--tp", "2", "--tensor-parallel-size", "8"])
    assert args.model_path == "m"
    assert args.tp_size == "8"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-path", "m", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--model-path", "m", "--disaggregation-mode", "both"], "invalid choice"),
        (["--tp-size", "2"], "the following arguments are required: --model-path"),
        (["--model-path", "m", "--cuda-graph-max-bs", "8"], "ambiguous option"),
    ],
)
def test_bad_flags_exit_2_like_sglang(parser, capsys, argv, message):
    with pytest.raises(SystemExit) as excinfo:
        parser.parse_args(argv)
    assert excinfo.value.code == 2
    assert message in capsys.readouterr().err


def test_removed_flags_are_not_accepted():
    table = load_flag_table()
    assert set(table.get("removed", {})).isdisjoint(table["flags"])


def test_cli_help_says_simulated_and_lists_env_knobs(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["sim", "python3", "-m", "sglang.launch_server", "--help"])
    out = capsys.readouterr().out
    assert excinfo.value.code == 0
    assert "SIMULATED" in out and "TEST DOUBLE" in out
    for name in ("SGLNODE_SIM_GPU", "SGLNODE_SIM_MODEL", "SGLNODE_SIM_TIME_SCALE", "SGLNODE_SIM_FAULT"):
        assert name in out
    assert "--mem-fraction-static" in out


def test_cli_rejects_unknown_flag_with_exit_2(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["sim", "--model-path", "m", "--bogus"])
    assert excinfo.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


# --- settings from the environment ----------------------------------------------------------------
def test_env_knobs_are_read(parser):
    env = {
        "SGLNODE_SIM_GPU": "h200",
        "SGLNODE_SIM_MODEL": "llama-3.1-70b-instruct",
        "SGLNODE_SIM_TIME_SCALE": "0.5",
        "SGLNODE_SIM_FAULT": "crash_after_requests:3,slow_stream",
    }
    config = build_config(parser.parse_args(RENDERED_ARGS), env)
    assert (config.gpu, config.model_preset, config.time_scale) == ("h200", "llama-3.1-70b-instruct", 0.5)
    assert config.faults.crash_after_requests == 3
    assert config.faults.slow_stream_factor == 10.0
    server = config.server()
    assert (server.tp, server.kv_cache_dtype, server.context_length, server.cuda_graph_max_bs_decode) == (
        4,
        "fp8_e4m3",
        131072,
        128,
    )
    assert server.role == "prefill" and server.mem_fraction_static == 0.85
    assert config.bootstrap_port == PINS.ports.bootstrap and config.disaggregation_mode == "prefill"


@pytest.mark.parametrize(
    ("text", "match"),
    [("oom:everything", "oom needs a phase"), ("explode", "unknown fault"), ("crash_after_s:soon", "number")],
)
def test_bad_fault_specs_are_rejected(text, match):
    with pytest.raises(SimConfigError, match=match):
        parse_faults(text)


def test_bad_env_value_exits_2_before_starting(capsys):
    code = run_sim(["--model-path", "m"], env={"SGLNODE_SIM_TIME_SCALE": "fast"}, stream=io.StringIO())
    assert code == 2
    assert "SGLNODE_SIM_TIME_SCALE" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--model-path", "m"], {"SGLNODE_SIM_GPU": "tpu-v9"}, "unknown GPU preset 'tpu-v9'"),
        (["--model-path", "m", "--tp-size", "four"], {}, "four"),
        (["--model-path", "m", "--tp-size", "2", "--ep-size", "4"], {}, "ep (4) must not exceed tp (2)"),
    ],
)
def test_unusable_settings_exit_2_without_a_traceback(capsys, argv, env, message):
    assert run_sim(argv, env=env, stream=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# --- startup lines -------------------------------------------------------------------------------
def test_startup_lines_follow_the_planner_and_parse_with_loglines():
    config = make_config(context_length="131072")
    plan, died, log = run_startup(config)
    assert died is None
    expected = plan_for(config)
    pools = loglines.DSV4_POOL_SIZES_RE.search(log)  # DeepSeek-V4 logs its pools, not "KV Cache is allocated"
    assert pools and int(pools.group("full")) == expected.kv_tokens
    begin = loglines.LOAD_WEIGHT_BEGIN_RE.search(log)
    assert begin and float(begin.group("avail_gb")) == pytest.approx(expected.pre_load_free_gb, abs=0.01)
    end = loglines.LOAD_WEIGHT_END_RE.search(log)
    assert end and float(end.group("avail_gb")) == pytest.approx(expected.avail_after_weights_gb, abs=0.01)
    assert loglines.CUDA_GRAPH_BEGIN_RE.search(log) and loglines.CUDA_GRAPH_END_RE.search(log)
    total = loglines.MAX_TOTAL_NUM_TOKENS_RE.search(log)
    assert total and int(total.group("tokens")) == plan.kv_tokens
    assert all(loglines.PREFIX_RE.match(line) for line in log.splitlines() if not line.startswith(" "))
    assert "Init torch distributed" not in log  # the pinned SGLang no longer prints it


@pytest.mark.parametrize("model", [FLASH, "llama-3.1-70b-instruct"])
def test_every_startup_line_is_an_upstream_template(model):
    # The simulator prints nothing the pinned SGLang would not: each line renders a catalogue template.
    _, died, log = run_startup(make_config(model=model, tp_size="4"))
    assert died is None
    patterns = [entry.pattern() for entry in catalog.load().values() if entry.kind == "log"]
    for line in log.splitlines():
        message = loglines.split_prefix(line).message
        assert any(p.fullmatch(message) for p in patterns), message


def test_llama_startup_logs_a_kv_cache_line_with_its_tokens():
    config = make_config(model="llama-3.1-70b-instruct", tp_size="4")
    _, _, log = run_startup(config)
    kv = loglines.KV_CACHE_ALLOCATED_RE.search(log)
    assert kv and int(kv.group("tokens")) == plan_for(config).kv_tokens
    assert "dtype: torch.bfloat16" in log


def test_startup_lines_drive_the_progress_tracker_to_serving():
    _, _, log = run_startup(make_config())
    tracker = ProgressTracker(started_at=0.0)
    for number, line in enumerate(log.splitlines(), start=1):
        tracker.feed(0.0, number, line)
    assert tracker.stage is Stage.SERVING
    assert [m.stage for m in tracker.milestones][:2] == [Stage.WEIGHTS, Stage.KV_CACHE]


def test_capture_batch_sizes_are_sglangs_for_the_planned_max():
    plan = plan_for(make_config(cuda_graph_max_bs_decode="100"))
    sizes = capture_batch_sizes(plan)
    assert sizes[:5] == [1, 2, 4, 8, 12] and sizes[-1] == 100 and sizes == sorted(set(sizes))


def test_disabled_cuda_graph_skips_capture():
    _, died, log = run_startup(make_config(cuda_graph_backend_decode="disabled"))
    assert died is None
    assert not loglines.CUDA_GRAPH_BEGIN_RE.search(log)


# --- memory failures match the planner -----------------------------------------------------------
MEMORY_CASES = [
    (FLASH, "rtx-pro-6000-blackwell", {"tp_size": "1"}, PHASE_WEIGHTS, "torch.OutOfMemoryError"),
    (
        "deepseek-v4-pro-fp8",
        "h200",
        {"tp_size": "8", "mem_fraction_static": "0.88"},
        PHASE_KV_CACHE,
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. "
        "Raise --mem-fraction-static above 0.905",
    ),
    (
        "llama-3.1-70b-instruct",
        "rtx-pro-6000-blackwell",
        {"tp_size": "4", "mem_fraction_static": "0.97", "cuda_graph_max_bs_decode": "512"},
        PHASE_CUDA_GRAPH,
        "Capture cuda graph failed",
    ),
]


@pytest.mark.parametrize(("model", "gpu", "args", "phase", "message"), MEMORY_CASES)
def test_config_that_does_not_fit_dies_in_the_planners_phase(model, gpu, args, phase, message):
    config = make_config(model=model, gpu=gpu, **args)
    assert plan_for(config).failure_phase == phase
    stream = io.StringIO()
    startup = Startup(config, SimLog(stream), sleep=lambda _s: None, die=lambda: None)
    with pytest.raises(StartupFailed) as excinfo:
        startup.run()
    assert excinfo.value.phase == phase
    log = stream.getvalue()
    assert message in log
    assert loglines.KILL_PROCESS_TREE_RE.search(log.splitlines()[-1])
    diagnosis = diagnose_lines(numbered(log.splitlines()))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", phase)


@pytest.mark.parametrize("phase", [PHASE_WEIGHTS, PHASE_KV_CACHE, PHASE_CUDA_GRAPH])
def test_oom_fault_forces_the_phase_on_a_config_that_fits(phase):
    config = make_config(faults=f"oom:{phase}")
    assert plan_for(config).fits
    _, died, log = run_startup(config)
    assert died == "died"
    assert diagnose_lines(numbered(log.splitlines())).phase == phase


def test_nccl_fault_dies_at_init_with_an_nccl_error():
    _, died, log = run_startup(make_config(faults="nccl_init"))
    assert died == "died"
    assert "RuntimeError: NCCL error: unhandled system error" in log  # pynccl_wrapper.py's message
    assert not loglines.LOAD_WEIGHT_BEGIN_RE.search(log)
    assert diagnose_lines(numbered(log.splitlines())).cause == "nccl"


def test_injected_runtime_crash_is_a_runtime_oom():
    config = make_config()
    stream = io.StringIO()
    died = []
    crash_runtime(SimLog(stream), plan_for(config), "crash_after_s:1", die=lambda: died.append(True))
    log = stream.getvalue()
    assert died == [True]
    assert loglines.KILL_PROCESS_TREE_RE.search(log)
    diagnosis = diagnose_lines(numbered(log.splitlines()))
    assert diagnosis.cause == "oom"


# --- pacing follows the roofline --------------------------------------------------------------------
def test_step_time_follows_the_roofline_shape_and_scales():
    config = make_config()
    plan = plan_for(config)
    engine = SimEngine(config, plan, SimLog(io.StringIO()), max_running_requests=64)
    one, many = engine.step_seconds(1), engine.step_seconds(64)
    assert one == pytest.approx(1 / plan.roofline[0].per_request_tok_s)
    assert many > one  # each request slows down...
    assert 64 / many > 4 / one  # ...while the batch's throughput grows
    fast = SimEngine(
        SimConfig(args=config.args, model_preset=FLASH, time_scale=0.1), plan, SimLog(io.StringIO()), 64
    )
    assert fast.step_seconds(1) == pytest.approx(one * 0.1)
    slow = SimEngine(make_config(faults="slow_stream:5"), plan, SimLog(io.StringIO()), 64)
    assert slow.step_seconds(1) == pytest.approx(one * 5)
