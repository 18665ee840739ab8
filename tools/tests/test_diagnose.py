import io
import json
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from sglnode.commands import diagnose as diagnose_command
from sglnode.diagnosis.diagnose import (
    SCHEMA_VERSION,
    Diagnoser,
    LogLine,
    diagnose_lines,
    frame_phase,
    numbered,
    read_gpu_memory,
    traceback_window,
)
from sglnode.diagnosis.rulebook import RuleError, load_phase_evidence, parse_phase_evidence

LOGS = Path(__file__).parent / "fixtures" / "logs"
# 20k routine lines take ~0.05 s here; a generous bound that still fails if the fast path breaks.
ROUTINE_BUDGET_S = 1.5


def _diagnose(name: str):
    return diagnose_lines(numbered((LOGS / name).read_text().splitlines(), source=name))


@pytest.mark.parametrize(
    ("name", "cause", "phase"),
    [
        ("oom_weights.log", "oom", "weights"),
        ("oom_kv_pool.log", "oom", "kv_cache"),
        ("oom_cuda_graph.log", "oom", "cuda_graph"),
        ("oom_runtime.log", "oom", "runtime"),
        ("capture_failed_not_oom.log", "cuda_graph_capture", None),
        ("kill_only.log", "unknown", None),
        ("scheduler_dead_exit_1.log", "unknown", None),
        ("scheduler_dead_exit_minus9.log", "host_oom", None),
        ("startup_ready_tp2.log", "unknown", None),
    ],
)
def test_fixture_logs_are_classified(name, cause, phase):
    diagnosis = _diagnose(name)
    assert (diagnosis.cause, diagnosis.phase) == (cause, phase)


def test_graph_capture_advice_mentioning_mem_fraction_is_not_oom_evidence():
    diagnosis = _diagnose("capture_failed_not_oom.log")
    assert diagnosis.cause != "oom"
    assert all("--mem-fraction-static to a smaller" not in line.text for line in diagnosis.evidence)
    # The pinned release deprecated --disable-cuda-graph: the fix names the flag that replaced it.
    assert "--cuda-graph-backend-decode disabled" in diagnosis.fix


def test_oom_evidence_carries_the_fatal_line_with_its_number_and_source():
    diagnosis = _diagnose("oom_weights.log")
    lines = (LOGS / "oom_weights.log").read_text().splitlines()
    fatal_no = next(number for number, text in enumerate(lines, 1) if "OutOfMemoryError" in text)
    assert any(
        line.line_no == fatal_no and line.source == "oom_weights.log" and "OutOfMemoryError" in line.text
        for line in diagnosis.evidence
    )
    assert any("kill_process_tree" in line.text for line in diagnosis.evidence)
    assert "--tp-size" in diagnosis.fix


def test_kv_pool_error_names_the_budget_fix_and_the_message_phase():
    diagnosis = _diagnose("oom_kv_pool.log")
    assert diagnosis.rule_id == "oom-kv-pool-budget"
    assert "--mem-fraction-static" in diagnosis.fix
    assert any("named by the error message" in note for note in diagnosis.notes)


def test_kill_only_says_unknown_and_what_to_look_at():
    diagnosis = _diagnose("kill_only.log")
    notes = " ".join(diagnosis.notes)
    assert diagnosis.cause == "unknown"
    assert diagnosis.confidence == "low"
    assert "rank-0 scheduler" in notes
    assert "dmesg" in notes
    assert "GPU memory at death" in notes
    assert any("kill_process_tree" in line.text for line in diagnosis.evidence)
    assert diagnosis.gpu_memory_at_death is None


def test_exit_code_minus_nine_is_only_suggestive():
    diagnosis = _diagnose("scheduler_dead_exit_minus9.log")
    assert diagnosis.confidence == "low"
    assert "dmesg" in diagnosis.fix


def test_oom_wins_over_the_nccl_error_it_caused_and_the_other_is_reported():
    lines = numbered(
        [
            "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    diagnosis = diagnose_lines(lines)
    assert diagnosis.cause == "oom"
    assert diagnosis.also_matched == [
        {"rule_id": "nccl-error", "cause": "nccl", "line_no": 1, "source": "log"}
    ]


def test_equal_priority_picks_the_earliest_line():
    lines = numbered(
        [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
            "RuntimeError: CUDA error: out of memory",
        ]
    )
    diagnoser = Diagnoser()
    diagnoser.feed_all(lines)
    assert diagnoser.best_hit().line.line_no == 1


def test_phase_falls_back_to_the_last_stage_when_frames_say_nothing():
    lines = numbered(
        [
            "[2026-11-29 09:40:00 TP0] Load weight begin. avail mem=93.61 GB",
            "[2026-11-29 09:40:30 TP0] Load weight end. elapsed=30.00 s, type=X, "
            "avail mem=6.00 GB, mem usage=87.61 GB.",
            "RuntimeError: CUDA error: out of memory",
        ]
    )
    diagnosis = diagnose_lines(lines)
    assert diagnosis.phase == "kv_cache"
    assert diagnosis.phase_evidence.kind == "marker"
    assert diagnosis.phase_evidence.line.line_no == 2
    assert any("last startup marker" in note for note in diagnosis.notes)


def test_a_forward_frame_places_an_oom_without_markers_at_runtime_not_at_weights():
    # An excerpt with no startup marker: the kernel frame says the model was computing; loading runs none.
    traceback = [
        "Traceback (most recent call last):",
        '  File "fla/ops/wy_fast.py", line 129, in recompute_w_u_fwd',
        "    u = torch.empty_like(v)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 180.00 MiB.",
    ]
    diagnosis = diagnose_lines(numbered(traceback))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "runtime")
    assert diagnosis.phase_evidence.kind == "forward"
    assert diagnosis.phase_evidence.line.line_no == 2
    # A loader frame outranks it (the outermost phase frame decides), and so does a startup marker.
    loader = '  File "sglang/srt/model_loader/loader.py", line 9, in load_model'
    loading = [traceback[0], loader, *traceback[1:]]
    assert diagnose_lines(numbered(loading)).phase == "weights"
    marked = ["[2026-11-29 09:40:00 TP0] Load weight begin. avail mem=93.61 GB", *traceback]
    assert diagnose_lines(numbered(marked)).phase_evidence.kind == "marker"
    # Without any frame the last stage reached is all there is.
    assert diagnose_lines(numbered(traceback[-1:])).phase_evidence.kind == "stage"


def test_phase_uses_the_crashing_rank_stage():
    lines = numbered(
        [
            "[2026-11-29 09:40:00 TP0] Load weight begin. avail mem=93.61 GB",
            "[2026-11-29 09:40:00 TP1] Load weight begin. avail mem=93.61 GB",
            "[2026-11-29 09:40:30 TP0] Load weight end. elapsed=30.00 s, type=X, "
            "avail mem=6.00 GB, mem usage=87.61 GB.",
            "[2026-11-29 09:40:31 TP1] Failed: CUDA out of memory. Tried to allocate 24.00 MiB.",
        ]
    )
    assert diagnose_lines(lines).phase == "weights"


@pytest.mark.parametrize(
    ("frames", "phase"),
    [
        (['  File "scheduler.py", line 1, in event_loop_overlap', "    self.run_batch(b)"], "runtime"),
        (['  File "model_runner.py", line 1, in init_device_graphs'], "cuda_graph"),
        (['  File "model_runner.py", line 1, in init_memory_pool'], "kv_cache"),
        (['  File "model_runner.py", line 1, in load_model'], "weights"),
        (['  File "x.py", line 1, in something_else'], None),
    ],
)
def test_frame_phase_reads_the_traceback_frames(frames, phase):
    recent = numbered(["noise", "Traceback (most recent call last):", *frames])
    found = frame_phase(traceback_window(recent), load_phase_evidence())
    assert (found[0] if found else None) == phase


def test_frame_phase_ignores_frames_from_an_older_traceback():
    recent = numbered(
        [
            "Traceback (most recent call last):",
            '  File "model_runner.py", line 1, in load_model',
            "ValueError: earlier, unrelated",
            "Traceback (most recent call last):",
            '  File "model_runner.py", line 1, in init_memory_pool',
        ]
    )
    phase, frame = frame_phase(traceback_window(recent), load_phase_evidence())
    assert (phase, frame.line_no) == ("kv_cache", 5)


def test_json_schema_is_stable():
    payload = _diagnose("oom_cuda_graph.log").to_json()
    assert list(payload) == [
        "schema_version",
        "cause",
        "phase",
        "phase_evidence",
        "rule_id",
        "rule_evidence",
        "confidence",
        "fix",
        "source_url",
        "stage",
        "evidence",
        "last_lines",
        "notes",
        "also_matched",
        "gpu_memory_at_death",
    ]
    assert payload["schema_version"] == SCHEMA_VERSION
    assert set(payload["evidence"][0]) == {"line_no", "text", "source"}
    assert payload["phase_evidence"]["kind"] in {"message", "frame", "marker", "forward", "size", "stage"}
    assert payload["rule_evidence"]
    json.dumps(payload)


def test_an_ask_larger_than_the_gpu_is_no_weight_shard():
    # No frame, marker or forward frame: only the message's own numbers. PyTorch states the ask and the
    # GPU's total; an ask above the total is a buffer sized from the configuration (KV pool, profile run).
    oversized = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1029.51 GiB. "
        "GPU 0 has a total capacity of 79.35 GiB of which 19.23 GiB is free."
    )
    diagnosis = diagnose_lines(numbered([oversized]))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "kv_cache")
    assert diagnosis.phase_evidence.kind == "size"
    assert any("more than the whole GPU" in note for note in diagnosis.notes)
    # torch before 2.2 words it "(GPU 0; 7.93 GiB total capacity; ...)"; units differ from the total's.
    older = (
        "RuntimeError: CUDA out of memory. Tried to allocate 8192.00 MiB "
        "(GPU 0; 7.93 GiB total capacity; 1 GiB free)"
    )
    assert diagnose_lines(numbered([older])).phase_evidence.kind == "size"
    # An ask that fits the GPU says nothing: the last stage (loading) stands.
    fits = oversized.replace("1029.51 GiB", "136.00 MiB")
    assert diagnose_lines(numbered([fits])).phase_evidence.kind == "stage"
    assert diagnose_lines(numbered([fits])).phase == "weights"
    # Past loading the marker decides, whatever the size.
    marked = [
        "[2026-11-29 09:40:00 TP0] Capture cuda graph begin. This can take up to several minutes.",
        oversized,
    ]
    assert diagnose_lines(numbered(marked)).phase == "cuda_graph"


def test_a_collective_failing_inside_the_capture_wrapper_is_the_captures():
    # SGLang wraps any capture exception ("Capture cuda graph failed: {e}"); the corpus labels a collective's
    # failure inside it the capture's (gloo, custom all-reduce), while the same words alone are NCCL's.
    wrapped = (
        "Exception: Capture cuda graph failed: Runtime check failed at "
        "sgl_kernel/distributed/custom_all_reduce.cuh:37: CUDA error: invalid argument"
    )
    assert diagnose_lines(numbered([wrapped])).cause == "cuda_graph_capture"
    bare = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'"
    assert diagnose_lines(numbered([bare])).cause == "nccl"
    # an architecture inside the wrapper stays the architecture's
    arch = (
        "Exception: Capture cuda graph failed: "
        "No supported CUDA architectures found for major versions [9, 10]."
    )
    assert diagnose_lines(numbered([arch])).cause == "arch_unsupported"


def test_cutlass_error_internal_at_initialize_is_a_shared_memory_refusal():
    # CUTLASS returns kErrorInternal when cudaFuncSetAttribute refuses the tile's dynamic shared memory;
    # "on sm120" in the runner's message does not make it a missing kernel.
    line = "RuntimeError: [FP4 gemm Runner] Failed to run cutlass FP4 gemm on sm120. Error: Error Internal"
    assert diagnose_lines(numbered([line])).cause == "kernel_resources"
    assert diagnose_lines(
        numbered(["RuntimeError: cutlass group_gemm.initialize failed: Error Internal"])
    ).cause == ("kernel_resources")
    # a bare status names no operation: not read
    assert diagnose_lines(numbered(["RuntimeError: Error Internal"])).cause == "unknown"


def test_conclusive_and_terminal_flags():
    diagnoser = Diagnoser()
    diagnoser.feed(
        LogLine(1, "[2026-11-29 10:10:41] kill_process_tree called: parent_pid=1, include_parent=True, pid=1")
    )
    assert diagnoser.terminal and not diagnoser.conclusive
    diagnoser.feed(LogLine(2, "ModuleNotFoundError: No module named 'sgl_kernel'"))
    assert not diagnoser.conclusive, "an import error waits for the process to go down"
    diagnoser.feed(LogLine(3, "torch.OutOfMemoryError: CUDA out of memory."))
    assert diagnoser.conclusive


def test_gpu_memory_is_parsed_from_nvidia_smi():
    output = "0, 95000, 97887\n1, 12, 97887\n"
    assert read_gpu_memory(lambda command: output) == [
        {"index": 0, "used_mib": 95000, "total_mib": 97887},
        {"index": 1, "used_mib": 12, "total_mib": 97887},
    ]


def test_gpu_memory_is_none_when_nvidia_smi_is_missing_or_odd(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert read_gpu_memory() is None
    assert read_gpu_memory(lambda command: "No devices were found") is None

    def broken(command):
        raise subprocess.TimeoutExpired(command, 5)

    assert read_gpu_memory(broken) is None


def test_gpu_memory_at_death_is_recorded_and_rendered():
    diagnoser = Diagnoser()
    diagnoser.feed(LogLine(1, "kill_process_tree called: parent_pid=1, include_parent=True, pid=1"))
    diagnosis = diagnoser.result([{"index": 0, "used_mib": 96000, "total_mib": 97887}])
    assert diagnosis.gpu_memory_at_death[0]["used_mib"] == 96000
    assert "GPU0 96000/97887 MiB" in diagnosis.render()


def _run_command(paths, as_json=True, stdin=None):
    out, err = io.StringIO(), io.StringIO()
    code = diagnose_command.run(Namespace(logs=paths, json=as_json), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_command_exit_codes_and_json():
    code, out, _ = _run_command([str(LOGS / "oom_weights.log")])
    assert code == 0
    assert json.loads(out)["cause"] == "oom"
    code, out, _ = _run_command([str(LOGS / "kill_only.log")])
    assert code == 1
    assert json.loads(out)["cause"] == "unknown"
    code, _, err = _run_command([str(LOGS / "does-not-exist.log")])
    assert code == 64
    assert "does-not-exist.log" in err


def test_command_reads_several_logs_keeping_each_source():
    code, out, _ = _run_command([str(LOGS / "kill_only.log"), str(LOGS / "oom_runtime.log")])
    payload = json.loads(out)
    assert code == 0
    assert payload["cause"] == "oom"
    assert {line["source"] for line in payload["evidence"]} >= {str(LOGS / "oom_runtime.log")}


def test_cli_reads_stdin_capture():
    text = (LOGS / "oom_kv_pool.log").read_text()
    result = subprocess.run(
        [sys.executable, "-m", "sglnode", "diagnose", "--json", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert (payload["cause"], payload["phase"]) == ("oom", "kv_cache")
    assert payload["evidence"][0]["source"] == "stdin"


def test_routine_serving_lines_are_skipped_quickly_but_failures_are_not():
    routine = (
        "[2026-11-29 10:05:00 TP0] Decode batch, #running-req: 64, #token: 16384, token usage: 0.41, "
        "cuda graph: True, gen throughput (token/s): 2840.12, #queue-req: 0"
    )
    lines = numbered([routine] * 20000 + ["torch.OutOfMemoryError: CUDA out of memory."])
    started = time.perf_counter()
    diagnosis = diagnose_lines(lines)
    assert time.perf_counter() - started < ROUTINE_BUDGET_S
    assert (diagnosis.cause, diagnosis.evidence[-1].line_no) == ("oom", 20001)


def test_equal_priority_across_files_picks_the_one_fed_first():
    diagnoser = Diagnoser()
    diagnoser.feed(LogLine(7, "RuntimeError: CUDA error: out of memory", source="z-rank0.log"))
    diagnoser.feed(LogLine(1, "torch.OutOfMemoryError: CUDA out of memory.", source="a-rank1.log"))
    assert diagnoser.best_hit().line.source == "z-rank0.log"


@pytest.mark.parametrize(
    ("lines", "opening"),
    [
        ([], "The log is empty"),
        (
            ["[2026-11-29 09:00:00 TP0] Load weight begin. avail mem=93.61 GB"],
            "does not show the server going down",
        ),
        (
            ["[2026-11-29 09:00:00] kill_process_tree called: parent_pid=7, include_parent=True, pid=7"],
            "the server was killed",
        ),
    ],
)
def test_unknown_says_what_the_log_shows_not_always_a_kill(lines, opening):
    diagnosis = diagnose_lines(numbered(lines))
    assert diagnosis.cause == "unknown"
    assert opening in diagnosis.notes[0]
    assert sum("killed without" in note for note in diagnosis.notes) == (opening == "the server was killed")


@pytest.mark.parametrize(
    "line",
    [
        "(EngineCore pid=1) INFO 01-01 12:00:00 [gpu_model_runner.py:1] CUDA graphs can take additional "
        "memory. If you are running out of memory, consider decreasing `gpu_memory_utilization`",
        "WARNING 01-01 12:00:00 [scheduler.py:1] Lowering max_num_seqs to avoid CUDA out of memory",
        "[2026-01-01 00:00:00 TP0] Note: a larger --cuda-graph-max-bs may cause CUDA out of memory errors",
        "I1203 12:00:00.000 allocator.cc:10] GPU memory: not enough device memory is reported as OOM here",
    ],
)
def test_a_line_that_narrates_or_advises_about_memory_is_no_oom_evidence(line):
    lines = numbered(
        [
            line,
            "[2026-01-01 00:00:01] Received sigquit from a child process. It usually means the child failed.",
        ]
    )
    assert diagnose_lines(lines).cause != "oom"


@pytest.mark.parametrize(
    "line",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
        "avoid fragmentation.",
        "RuntimeError: Error when trying to allocate: CUDA out of memory",
        "(EngineCore pid=1) ERROR 01-01 12:00:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory.",
        # a log collector (Cloud Logging on GKE) that wraps every line at its own INFO level
        "INFO 2025-11-19T20:16:36.096638074Z [resource.labels.containerName: vllm] (EngineCore_DP0 pid=270) "
        "ERROR 11-19 12:16:36 [v1/engine/core.py:842] torch.OutOfMemoryError: CUDA out of memory.",
    ],
)
def test_an_error_that_reports_an_oom_is_still_one(line):
    assert diagnose_lines(numbered([line])).cause == "oom"


def _restarted(first: str, then: list[str]) -> list[str]:
    """A crash, then the restarted server's own lines (compose restart: on-failure, systemd Restart=)."""
    return [*(LOGS / first).read_text().splitlines(), *then]


def test_a_restart_that_has_not_failed_yet_keeps_the_crash_before_it():
    # What a wait ending between a crash and the restarted start's own failure reads (the e2e release
    # test's KV-starved decode server under restart: on-failure:2).
    lines = _restarted(
        "oom_kv_pool.log",
        [
            "[2026-11-29 09:31:50] server_args=ServerArgs(model_path='/models/dsv4-pro-fp8', tp_size=8)",
            "[2026-11-29 09:31:51 TP0] Load weight begin. avail mem=139.12 GB",
        ],
    )
    diagnosis = diagnose_lines(numbered(lines, source="restarted.log"))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "kv_cache")
    assert any("restarted after this crash" in note for note in diagnosis.notes)


def test_a_restart_that_went_down_again_is_diagnosed_on_its_own_lines():
    # The latest start died without a signature (a kill): unknown, not the earlier start's OOM.
    lines = _restarted("oom_kv_pool.log", (LOGS / "kill_only.log").read_text().splitlines())
    start = "[2026-11-29 10:09:59] server_args=ServerArgs(model_path='/models/q', tp_size=8)"
    lines.insert(len(lines) - 3, start)
    diagnosis = diagnose_lines(numbered(lines, source="restarted.log"))
    assert diagnosis.cause == "unknown"
    assert any("earlier server start" in note for note in diagnosis.notes)


PD_FRAME = '  File "/opt/sglang/sglang/srt/disaggregation/utils.py", line 1162, in register_draft_buffers'


def test_a_traceback_through_the_pd_code_names_kv_transfer_when_no_words_do():
    crash = [
        "[2026-11-29 09:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/sglang/srt/managers/scheduler.py", line 2883, in event_loop_disagg_decode',
        "    self.process_decode_queue()",
        PD_FRAME,
        "    raise RuntimeError(",
        "RuntimeError: State index length mismatch at component 0: prefill=2, dst=1",
    ]
    diagnosis = diagnose_lines(numbered(crash))
    assert diagnosis.cause == "kv_transfer"
    assert (diagnosis.rule_id, diagnosis.confidence) == ("code-kv_transfer", "low")
    assert [line.line_no for line in diagnosis.evidence][:2] == [4, 6]
    assert "traceback of the last error runs through kv_transfer's code (line 4)" in diagnosis.notes[0]


def test_frames_printed_after_an_error_do_not_name_its_family():
    # faulthandler lists every thread after the fatal line: a PD thread idling in its loop is not the crash.
    dump = [
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x00007f2ea0870640 (most recent call first):",
        PD_FRAME.replace(", in register_draft_buffers", " in transfer_worker"),
        '  File "/usr/lib/python3.10/threading.py", line 953 in run',
    ]
    assert diagnose_lines(numbered(dump)).cause == "unknown"


def test_an_error_raised_while_importing_is_an_import_error():
    crash = [
        "Traceback (most recent call last):",
        '  File "/opt/app/serve.py", line 3, in <module>',
        "    import fancy_kernels",
        '  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load',
        '  File "/opt/venv/fancy_kernels/__init__.py", line 9, in <module>',
        "    _check()",
        "AssertionError: fancy_kernels was built for a different interpreter",
    ]
    assert diagnose_lines(numbered(crash)).cause == "import_error"


def test_torchruns_report_of_a_dead_worker_is_no_collective_failure():
    # The launcher's frames are in torch/distributed/, but they only say a child failed.
    site = "/usr/local/lib/python3.10/dist-packages/torch/distributed"
    report = [
        "Traceback (most recent call last):",
        f'  File "{site}/run.py", line 794, in main',
        "    run(args)",
        f'  File "{site}/launcher/api.py", line 259, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "train.py FAILED",
    ]
    assert diagnose_lines(numbered(report)).cause == "unknown"
    # A collective's own frame under an error in no family's words is one.
    collective = [
        report[0],
        f'  File "{site}/distributed_c10d.py", line 2501, in all_reduce',
        "    work = group.allreduce([tensor], opts)",
        "ValueError: Tensors must be contiguous",
    ]
    assert diagnose_lines(numbered(collective)).rule_id == "code-nccl"


def test_terminal_colour_codes_do_not_hide_an_anchored_signature():
    # vLLM/Ray colour their prefixes in `docker logs`; a copy from a terminal keeps "[36m" without ESC.
    coloured = [
        "\x1b[36m(RayWorkerWrapper pid=4021)\x1b[0m INFO 01-01 loading weights",
        "[36m(RayWorkerWrapper pid=4021)[0m Traceback (most recent call last):",
        '[36m(RayWorkerWrapper pid=4021)[0m   File "/opt/vllm/worker/model_runner.py", line 1, in load_model',
        "[36m(RayWorkerWrapper pid=4021)[0m torch.OutOfMemoryError: CUDA out of memory.",
    ]
    diagnosis = diagnose_lines(numbered(coloured))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "weights")
    assert all("[36m" not in line.text and "\x1b" not in line.text for line in diagnosis.evidence)
    # glog's "E0101" must open the line for the vocabulary: after a colour code it still does.
    glog = ["\x1b[31mE1203 12:00:01.000 12 transfer_engine.cpp:88] Failed to open segment prefill:1\x1b[0m"]
    assert diagnose_lines(numbered(glog)).cause == "kv_transfer"
    # A bracketed word that only looks like a colour code stays.
    assert "[3m" in diagnose_lines(numbered(["ValueError: bad window [3m]"])).last_lines[0].text


SGLANG_SITE = "/sgl-workspace/sglang/python/sglang/srt"


def test_a_traceback_cut_inside_graph_capture_names_capture_but_a_thread_dump_does_not():
    cut = [
        "[TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{SGLANG_SITE}/model_executor/model_runner.py", line 1083, in init_cuda_graphs',
        "    capture = capture_cuda_graphs(",
        f'  File "{SGLANG_SITE}/model_executor/model_runner_components/cuda_graph_setup.py", line 246, in '
        "capture_cuda_graphs",
        "    decode = capture_decode_graph(model_runner=model_runner)",
    ]
    diagnosis = diagnose_lines(numbered(cut))
    assert (diagnosis.cause, diagnosis.rule_id) == ("cuda_graph_capture", "code-cuda_graph_capture")
    # faulthandler's dump lists every thread's frames ("line N in f", no comma): an idle thread in
    # capture or PD code at the end of the log is not where the crash happened.
    dump = [
        "Fatal Python error: Segmentation fault",
        "Thread 0x00007fbc5ffff640 (most recent call first):",
        f'  File "{SGLANG_SITE}/disaggregation/common/utils.py", line 24 in get',
    ]
    assert diagnose_lines(numbered(dump)).cause == "unknown"


def test_a_caret_line_under_a_logger_prefix_is_no_error_line():
    # vLLM prefixes every traceback line with its logger's "ERROR ... core.py:1231]": the caret line
    # under a quoted source line says nothing, so the frames above it are not "the last error".
    prefix = "(EngineCore pid=1140) ERROR 07-15 00:27:03 core.py:1231]"
    lines = [
        f'{prefix}   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu/cudagraph_utils.py", '
        "line 360, in capture",
        f"{prefix}     fwd = forward_fn(x)",
        f'{prefix}   File "/usr/local/lib/python3.12/dist-packages/vllm/model.py", line 346, in _prefill',
        f"{prefix}     hidden = self._run_model(",
        f"{prefix}              ^^^^^^^^^^^^^^^",
        f'{prefix}   File "/usr/local/lib/python3.12/dist-packages/vllm/model.py", line 99, in _run_model',
        f"{prefix}     return self.model(x)",
        f"{prefix}            ^^^^^^^^^^^^^",
    ]
    diagnosis = diagnose_lines(numbered(lines))
    assert diagnosis.cause == "unknown"
    assert all("^^^" not in line.text for line in diagnosis.last_lines)


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # the same torch message is a port in use only when the bind was refused for that
        (
            "RuntimeError: The server socket has failed to listen on any local network address. The server "
            "socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
            "port_in_use",
        ),
        (
            "OSError: failed to bind to 0.0.0.0:80 (errno: 13 - Permission denied)",
            "unknown",
        ),
        # Go's net package, its OS words localised (Windows in Turkish)
        (
            "Error: listen tcp 127.0.0.1:11434: bind: Normal olarak her yuva adresi i\u00e7in yaln\u0131zca "
            "bir kullan\u0131ma izin veriliyor.",
            "port_in_use",
        ),
        # ROCm's runtime reporting a GPU fault is a fault, not an engine's hang detector
        ("HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :GPU Hang", "unknown"),
    ],
)
def test_port_and_fault_words_read_the_errno_and_the_runtime(line, cause):
    assert diagnose_lines(numbered([line])).cause == cause


@pytest.mark.parametrize(
    "serving_line",
    [
        "2025-06-06T22:33:13.344067Z  INFO mistralrs_core::engine::logger: Throughput (T/s) 6.00, 1 running",
        'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "INFO 06-19 11:23:59 metrics.py:341] Avg prompt throughput: 3526.1 tokens/s, Running: 8 reqs",
        '[GIN] 2024/05/01 - 10:00:00 | 200 |  1.2s |  127.0.0.1 | POST     "/api/generate"',
    ],
)
def test_an_oom_after_requests_were_answered_is_a_runtime_one(serving_line):
    # No traceback: the engines' own per-request lines are the marker that the server was serving.
    lines = [
        "[2026-01-01 00:00:00] Load weight begin. avail mem=94.10 GB",
        serving_line,
        'Error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")',
    ]
    diagnosis = diagnose_lines(numbered(lines))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "runtime")
    assert diagnosis.phase_evidence.kind == "marker"
    assert diagnosis.phase_evidence.line.line_no == 2
    # Without the serving line the weight-loading marker decides.
    assert diagnose_lines(numbered([lines[0], lines[2]])).phase == "weights"


def test_mistral_rs_failing_an_engine_step_is_serving_whatever_marker_came_before():
    # mistral.rs's engine loop steps only on scheduled requests: its "step - Model failed" places the OOM.
    lines = [
        "[2026-01-01 00:00:00] Load weight begin. avail mem=94.10 GB",
        "2025-01-12T10:40:23.640332Z ERROR mistralrs_core::engine: step - Model failed with error: "
        'Cuda(Cuda(DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")))',
    ]
    diagnosis = diagnose_lines(numbered(lines))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "runtime")
    assert diagnosis.phase_evidence.kind == "frame" and diagnosis.phase_evidence.line.line_no == 2


def test_a_message_wrapped_over_two_lines_is_matched_rejoined():
    wrapped = [
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be",
        "stored in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
    ]
    diagnosis = diagnose_lines(numbered(wrapped))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "kv_cache")
    assert diagnosis.evidence[0].line_no == 2 and diagnosis.evidence[0].text.startswith(
        "ValueError: The model"
    )
    # A line that ends its sentence is not continued by the next one.
    ended = [wrapped[0] + " done.", wrapped[1]]
    assert diagnose_lines(numbered(ended)).cause != "oom"
    # A rule the first line matches on its own keeps that line; the continuation is no second hit.
    oom = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "of which 10 MiB is free",
    ]
    assert [line.line_no for line in diagnose_lines(numbered(oom)).evidence] == [1]


def test_a_long_line_wrapped_before_a_capitalised_word_is_matched_rejoined():
    # A report's line width cuts anywhere: here between UCX's component and its level.
    wrapped = [
        "[1784621081.896649] [kimi-k2-disagg-prefill-92c6hc-07210529-pod:537  :1]       srd_iface.c:221  UCX",
        "ERROR send completion[0] with error on rdmap132s0/0x55cf4425cfb0: Work Request Flushed Error",
    ]
    assert diagnose_lines(numbered(wrapped)).cause == "kv_transfer"
    # A short line is a line of its own: a capitalised line under it starts anew.
    short = ["[1784621081.896649] [pod:537 :1] srd_iface.c:221  UCX", wrapped[1]]
    assert diagnose_lines(numbered(short)).cause != "kv_transfer"


def test_a_warning_that_says_what_it_does_instead_is_no_failure():
    # vLLM on this GPU at every start: the all-reduce takes another path and the server goes on.
    fallback = (
        "WARNING 08-19 10:00:00 [symm_mem.py:54] SymmMemCommunicator: Device capability 12.0 not supported, "
        "communicator is not available."
    )
    assert diagnose_lines(numbered([fallback])).cause == "unknown"
    # The same words as an error still count, and a fallback does not hide the failure after it.
    assert diagnose_lines(numbered([fallback.replace("WARNING", "ERROR")])).cause == "arch_unsupported"
    fault = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    assert diagnose_lines(numbered([fallback, fault])).cause == "arch_unsupported"
    # A transport that is only "not available" is no fallback (UCX without cuda_ipc breaks NIXL).
    ucx = "[1746690477.97] [llm206:611 :0] ucp_context.c:1268 UCX  WARN  transports 'cuda_ipc' not available"
    assert diagnose_lines(numbered([ucx])).cause == "kv_transfer"


def test_an_info_line_reports_a_failure_only_in_so_many_words():
    # vLLM shutting down on a SIGTERM narrates its abort mode; a health check that failed says so.
    shutdown = [
        "(APIServer pid=551751) INFO 08-21 10:24:34 [launcher.py:116] [shutdown] API server: stopping engine "
        "client mode=abort timeout=0s",
        "(EngineCore pid=552076) INFO 08-21 10:24:34 [core.py:1333] [shutdown] EngineCore: start mode=abort",
    ]
    assert diagnose_lines(numbered(shutdown)).cause == "unknown"
    health = "[Router (Rust)] 2025-03-08 02:33:09 - INFO - Worker http://0.0.0.0:31000 health check failed"
    assert diagnose_lines(numbered([health])).cause == "watchdog_timeout"


def test_requests_answered_after_an_oom_place_it_at_runtime():
    # No marker before it, but the server went on answering: a loading, sizing or capture OOM ends it.
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 166.00 MiB (GPU 0; 8.00 GiB total "
        "capacity; 6.93 GiB already allocated; 0 bytes free; 7.22 GiB reserved in total by PyTorch)"
    )
    served = 'INFO:     127.0.0.1:50412 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error'
    diagnosis = diagnose_lines(numbered([oom, served]))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "runtime")
    assert diagnosis.phase_evidence.kind == "served" and diagnosis.phase_evidence.line.line_no == 2
    # A startup marker before the OOM still decides: it says where the process was when it failed.
    loading = "[2026-12-01 12:00:00 TP0] Load weight begin. avail mem=94.50 GB"
    assert diagnose_lines(numbered([loading, oom, served])).phase == "weights"
    # Nothing after it: the stage reached.
    assert diagnose_lines(numbered([oom])).phase_evidence.kind == "stage"


def test_an_error_raised_by_a_module_while_it_is_imported_is_an_import_failure():
    # flashinfer.comm on Python 3.11: its top level raises a TypeError, so `import flashinfer.comm` fails.
    traceback = [
        "Traceback (most recent call last):",
        '  File "/srv/app/serve.py", line 3, in <module>',
        "    run()",
        '  File "/venv/lib/python3.11/site-packages/vllm/compilation/fusion.py", line 90, in run',
        "    import flashinfer.comm as _flashinfer_comm",
        '  File "/venv/lib/python3.11/site-packages/flashinfer/comm/fd_exchange.py", line 55, in <module>',
        "    def _fd_ancillary(fd: int) -> tuple[tuple[int, int, array.array[int]]]:",
        "TypeError: type 'array.array' is not subscriptable",
    ]
    diagnosis = diagnose_lines(numbered(traceback))
    assert (diagnosis.cause, diagnosis.rule_id) == ("import_error", "code-import_error")
    # The script's own top level is no import, nor is a module `python -m` runs.
    script = [traceback[0], traceback[1], "    run()", traceback[-1]]
    assert diagnose_lines(numbered(script)).cause == "unknown"
    runpy = [
        traceback[0],
        '  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code',
        "    exec(code, run_globals)",
        '  File "/venv/lib/python3.11/site-packages/sglang/launch_server.py", line 14, in <module>',
        "    main()",
        traceback[-1],
    ]
    assert diagnose_lines(numbered(runpy)).cause == "unknown"


def test_only_serving_markers_can_be_requests_answered():
    # "requests" says the server lived on to answer more; a loading or sizing marker cannot say that.
    loading = {"stage": "weights", "requests": True, "patterns": ["Load weight"]}
    with pytest.raises(RuleError, match="requests marks serving markers only"):
        parse_phase_evidence({"markers": [loading]})
    answered = {"stage": "serving", "requests": True, "patterns": ["200 OK"]}
    evidence = parse_phase_evidence({"markers": [answered]})
    assert evidence.is_request_line('"POST /generate HTTP/1.1" 200 OK')
    assert not evidence.is_request_line("The server is fired up and ready to roll!")


ALLOCATOR_WARNING = (
    "[rank1]:[W906 07:46:05.008634648 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on"
    " device 1 while trying to allocate 4334813184 bytes (free: 3779919872, total: 287431131136)."
)


def test_the_allocators_oom_warning_is_an_oom_only_when_the_process_fails_after_it():
    # the pinned torch warns when a cudaMalloc fails, then frees its cache and retries: alone, or with
    # the server serving after it, the warning was survived; a traceback after it is the crash it began
    died = [
        ALLOCATOR_WARNING,
        "[2026-09-06 07:46:05 DP1 TP1 EP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 900,'
        " in init_memory_pool",
    ]
    served = "[2026-09-06 07:46:06 TP0] Decode batch. #running-req: 4, #token: 5120, token usage: 0.10"
    later = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system"
    assert diagnose_lines(numbered([ALLOCATOR_WARNING])).cause == "unknown"
    crash = diagnose_lines(numbered(died))
    assert (crash.cause, crash.phase, crash.rule_id) == ("oom", "kv_cache", "oom-allocator-warning")
    assert "memory allocation failed with OOM on device 1" in crash.evidence[0].text
    assert diagnose_lines(numbered([ALLOCATOR_WARNING, served, later])).cause == "nccl"
    # the allocation that finally failed, when the log has it, is the evidence that decides
    final = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.04 GiB. GPU 1 has a total"
    assert diagnose_lines(numbered([ALLOCATOR_WARNING, final])).rule_id == "oom-cuda-alloc"


def test_a_traceback_cut_right_under_a_call_into_capture_code_names_capture():
    # the paste stops at the source line of the last frame shown: the call on it is the frame it did
    # not reach (ktransformers' prefill_and_generate calling its graph runner's capture)
    cut = [
        "Traceback (most recent call last):",
        '  File "ktransformers/ktransformers/util/utils.py", line 247, in prefill_and_generate',
        "    cuda_graph_runner.capture(model, next_token.unsqueeze(0), position_ids, use_cache=True)",
    ]
    diagnosis = diagnose_lines(numbered(cut))
    assert (diagnosis.cause, diagnosis.rule_id) == ("cuda_graph_capture", "code-cuda_graph_capture")
    assert diagnosis.evidence[0].line_no == 2
    arch = [*cut[:2], "    check_cuda_arch()"]
    assert diagnose_lines(numbered(arch)).cause == "arch_unsupported"
    # a call into no family's code, or an exception line after the call, says nothing of the sort
    assert diagnose_lines(numbered([*cut[:2], "    output = func(*args, **kwargs)"])).cause == "unknown"
    raised = "TypeError: capture() got an unexpected keyword"
    assert diagnose_lines(numbered([*cut, raised])).cause == "unknown"


def test_ggmls_buffer_failure_is_the_hosts_when_its_cpu_buffer_was_refused_first():
    # "failed to allocate compute buffers" names no device: after a CPU buffer refusal it is host
    # memory that ran out (llamafile on the CPU); alone, or after a GPU buffer refusal, it is a GPU OOM
    generic = "llama_new_context_with_model: failed to allocate compute buffers"
    cpu = "ggml_gallocr_reserve_n: failed to allocate CPU buffer of size 84940800"
    gpu = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2560.00 MiB on device 0: cudaMalloc failed:"
        " out of memory"
    )
    assert diagnose_lines(numbered([cpu, generic])).cause == "host_oom"
    alone = diagnose_lines(numbered([generic]))
    assert (alone.cause, alone.phase) == ("oom", "kv_cache")
    assert diagnose_lines(numbered([gpu, generic])).cause == "oom"


def test_a_traceback_flattened_onto_one_line_still_says_its_exception():
    # a paste that lost the newlines: the header, the frames and the exception on one line; the
    # exception after the frames is the error, and its words name the family (a full /dev/shm)
    flattened = (
        "Reading in atlas ERROR: Unexpected bus error encountered in worker. Traceback (most recent call"
        ' last): File "/py/torch/utils/data/dataloader.py", line 990, in _try_get_data data ='
        " self._data_queue.get(timeout=timeout) RuntimeError: DataLoader worker (pid 2115) is killed by"
        " signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try"
        " to raise your shared memory limit."
    )
    assert diagnose_lines(numbered([flattened])).cause == "host_oom"
    # one frame quoted on its own line is still only a frame
    frame = '  File "/py/torch/utils/data/dataloader.py", line 990, in _try_get_data'
    assert diagnose_lines(numbered([frame])).cause == "unknown"


@pytest.mark.parametrize(
    ("lines", "phase"),
    [
        # an HTTP error answer carrying the OOM: a request was being served
        (["ApiError: 500 Internal Server Error: CUDA error: out of memory"], "runtime"),
        # a functional op on the quoted source line: the model was computing
        (
            [
                '  File "/app/surya/model.py", line 88, in attend',
                "    attn_output = torch.nn.functional.scaled_dot_product_attention(",
                "RuntimeError: MPS backend out of memory (MPS allocated: 7.23 GB, other allocations: 1.5 GB)",
            ],
            "runtime",
        ),
        # ComfyUI loads a prompt's model when the prompt runs: its patcher's frames are the weights'
        (
            [
                '  File "E:/ComfyUI/comfy/model_patcher.py", line 393, in load',
                "    self.patch_weight_to_device(weight_key, device_to=device_to)",
                "torch.OutOfMemoryError: Allocation on device ",
                "2024-09-16 01:41:08,368 - root - INFO - Prompt executed in 62.07 seconds",
            ],
            "weights",
        ),
        # koboldcpp's prompt processing on the OOM's own line: a request
        (["Processing Prompt [BLAS] (512 / 12710 tokens)CUDA error: out of memory"], "runtime"),
        # ComfyUI's markers: the model requested and loading, then loaded and sampling
        (
            [
                "2024-09-11 11:50:30,102 - root - INFO - got prompt",
                "2024-09-11 11:50:30,198 - root - INFO - Requested to load Flux",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 58.00 MiB.",
            ],
            "weights",
        ),
        (
            [
                "2024-09-11 11:50:30,198 - root - INFO - Loading 1 new model",
                "2024-09-11 11:51:35,123 - root - INFO - loaded partially 11337.904888916015 11337.85 1",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 58.00 MiB.",
            ],
            "runtime",
        ),
        # a driver's traceback printed after the engine's OOM, cut at the call into the engine's generate
        (
            [
                "(EngineCore pid=4108) ERROR 05-28 08:00:36 [core.py:1142] torch.OutOfMemoryError: CUDA OOM",
                "Traceback (most recent call last):",
                '  File "/workspace/cpu_offload.py", line 70, in generate_and_print_output',
                "    outputs = llm.generate(prompts, sampling_params)",
            ],
            "runtime",
        ),
        # mistral.rs serving, then candle's OOM
        (
            [
                "Model loaded.",
                "Serving on http://0.0.0.0:1234.",
                'Model failed with error `DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")`.',
            ],
            "runtime",
        ),
        # Tenstorrent's bank allocator under a model runner's execute_model
        (
            [
                "Out of Memory: Not enough space to allocate 499122176 B DRAM buffer across 12 banks",
                'ERROR 10-01 22:09:37 [engine.py:187]   File "/vllm/worker/tt_model_runner.py", line 567, in'
                " execute_model",
            ],
            "runtime",
        ),
        # ggml's graph reserve at context creation sizes the buffers next to the KV cache; under a request
        # in flight (ollama loading its prompt into a cache slot) it grew for that request
        (
            [
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1953.40 MiB on device 1: cudaMalloc"
                " failed: out of memory",
                "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 2048290048",
            ],
            "kv_cache",
        ),
        (
            [
                'time=2025-05-18T08:36:01.003Z level=DEBUG source=cache.go:136 msg="loading cache slot" id=0',
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1953.40 MiB on device 1: cudaMalloc"
                " failed: out of memory",
                "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 2048290048",
            ],
            "runtime",
        ),
    ],
)
def test_the_oom_phase_from_other_servers_words(lines, phase):
    diagnosis = diagnose_lines(numbered(lines))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", phase)


def test_a_warning_whose_next_line_says_what_is_skipped_is_a_fallback():
    # LMCache warns that it could not allocate a buffer, and its next line says it will not store that
    # request's KV cache: the server goes on, so the pair is no failure (a warning alone still speaks)
    warning = "[2025-07-03 12:45:27,563] LMCache WARNING: Failed to allocate memory for the KV cache."
    skipped = "The KV cache will not be stored. (cache_engine.py:200:lmcache.v1.cache_engine)"
    assert diagnose_lines(numbered([warning, skipped])).cause == "unknown"
    assert diagnose_lines(numbered([warning])).cause == "kv_transfer"


def test_a_collective_failing_in_a_traceback_through_capture_code_is_the_captures():
    # DeepEP's timeout under SGLang's capture_one_batch_size: inside the capture, as inside its wrapper;
    # the same error under the serving loop is the collective's
    error = "DeepEP error: CPU recv timeout"
    header = "[2025-05-12 13:58:24 DP3 TP3] Scheduler hit an exception: Traceback (most recent call last):"
    capture = (
        f'  File "{SGLANG_SITE}/model_executor/cuda_graph_runner.py", line 505, in capture_one_batch_size'
    )
    serving = f'  File "{SGLANG_SITE}/managers/scheduler.py", line 900, in event_loop_normal'
    captured = diagnose_lines(numbered([error, header, capture, "    out = run_once()"]))
    assert (captured.cause, captured.rule_id) == ("cuda_graph_capture", "code-cuda_graph_capture")
    assert diagnose_lines(numbered([error, header, serving, "    self.run_batch(batch)"])).cause == "nccl"
    # the pinned release's decode runner captures in runner/decode_cuda_graph_runner.py's capture()
    pinned = f'  File "{SGLANG_SITE}/model_executor/runner/decode_cuda_graph_runner.py", line 700, in capture'
    assert diagnose_lines(numbered([error, header, pinned, "    self._capture_one_stream()"])).cause == (
        "cuda_graph_capture"
    )
    # a rule's collective error too
    nccl = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error"
    )
    assert (
        diagnose_lines(numbered([header, capture, "    out = run_once()", nccl])).cause
        == "cuda_graph_capture"
    )
    assert diagnose_lines(numbered([nccl])).cause == "nccl"


NEGATIVE_KV_BUDGET = (
    "(EngineCore_DP0 pid=563) INFO 12-23 23:34:23 [gpu_worker.py:298] Available KV cache memory: -2.77 GiB"
)


def test_vllms_negative_kv_budget_is_the_kv_caches_oom_once_the_engine_fails_after_it():
    # vLLM logs the profiled budget at INFO; negative, and the engine failing to start after it, the weights
    # and the profiling peak left the KV cache nothing (round 15: vllm-omni, the exception itself cut off)
    failed = "(EngineCore_DP0 pid=563) ERROR 12-23 23:34:23 [core.py:708] EngineCore failed to start."
    crash = diagnose_lines(numbered([NEGATIVE_KV_BUDGET, failed]))
    assert (crash.cause, crash.phase, crash.rule_id) == ("oom", "kv_cache", "oom-kv-budget-negative")
    assert diagnose_lines(numbered([NEGATIVE_KV_BUDGET])).cause == "unknown"
    positive = NEGATIVE_KV_BUDGET.replace("-2.77", "9.90")
    assert diagnose_lines(numbered([positive, failed])).cause != "oom"
    # the INFO level still sets other memory lines aside: only a rule that reads INFO lines counts them
    narration = (
        "INFO 12-23 23:34:23 [gpu_worker.py:300] If you are running out of memory, lower max_num_seqs."
    )
    assert diagnose_lines(numbered([narration, failed])).cause != "oom"


def test_inductors_autotuner_dropping_a_config_for_its_shared_memory_is_no_failure():
    # select_algorithm.py logs a candidate's OutOfResources at glog's W level and times the others (corpus
    # 2073); the same limit raised, or logged as an error of the autotuning, is the failure
    skipped = (
        "W0306 14:40:15.990000 1719866 .venv/lib/python3.12/site-packages/torch/_inductor/"
        "select_algorithm.py:1517] [2/0] out of resource: shared memory, Required: 131072, Hardware limit:"
        " 101376. Reducing block sizes or `num_stages` may help."
    )
    assert diagnose_lines(numbered([skipped, "AUTOTUNE mm(16384x128, 128x256)"])).cause == "unknown"
    raised = (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072,"
        " Hardware limit: 101376. Reducing block sizes or `num_stages` may help."
    )
    assert diagnose_lines(numbered([skipped, raised])).cause == "kernel_resources"
    # c10d's W-level lines are not an autotuner's: its socket timeout stays an error
    c10d = (
        "[rank1]:[W128 20:19:24.072980603 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=69) timed"
        " out after 600000ms"
    )
    assert diagnose_lines(numbered([c10d])).cause == "nccl"


def test_vllms_broadcast_wait_notice_is_a_hang_only_when_no_failure_follows_it():
    # shm_broadcast.py logs the wait every 60 s and goes on waiting while a worker is busy (capturing graphs,
    # compiling): the failure it waited on is the cause (round 16: vLLM-Ascend's capture out of streams)
    wait = (
        "(EngineCore_DP0 pid=15471) INFO 10-11 11:31:28 [shm_broadcast.py:466] No available shared memory"
        " broadcast block found in 60 seconds. This typically happens when some processes are hanging."
    )
    capture = (
        "(Worker_TP11 pid=15618) ERROR 10-11 11:32:59 [model_runner_v1.py:3556] ACLgraph has insufficient"
        " available streams to capture the configured number of sizes."
    )
    assert diagnose_lines(numbered([wait])).cause == "watchdog_timeout"
    assert diagnose_lines(numbered([wait, wait, capture])).cause == "cuda_graph_capture"


def test_a_cuda_fault_a_process_group_watchdog_found_is_the_fault_not_nccls():
    # c10d's watchdog rethrows what it found polling the stream; the C++ runtime announces the class first
    announced = "terminate called after throwing an instance of 'c10::DistBackendError'"
    fault = (
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with"
        " exception: CUDA error: an illegal memory access was encountered"
    )
    diagnosis = diagnose_lines(numbered([announced, fault]))
    assert diagnosis.cause == "unknown"
    assert any("CUDA fault" in note for note in diagnosis.notes)
    # the same announcement over NCCL's own error is NCCL's
    nccl = "  what():  NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    assert diagnose_lines(numbered([announced, nccl])).cause == "nccl"


def test_a_fallback_that_sets_a_value_and_tensorflows_w_level_fallback_are_no_failure():
    set_instead = (
        "(Worker_TP0 pid=132) WARNING 05-03 23:48:03 [compilation.py:1390] CUDAGraphMode.FULL_AND_PIECEWISE"
        " is not supported with spec-decode for attention backend FlashInferBackend; setting cudagraph_mode=X"
    )
    xla = (
        "2023-09-26 23:49:25.317379: W external/xla/xla/stream_executor/gpu/asm_compiler.cc:231] Falling back"
        " to the CUDA driver for PTX compilation; ptxas does not support CC 9.0"
    )
    for line in (set_instead, xla):
        assert diagnose_lines(numbered([line])).cause == "unknown", line
    # the same words logged as an error are still read
    failed = xla.replace(": W external", ": E external").replace("Falling back to", "Could not use")
    assert diagnose_lines(numbered([failed])).cause == "arch_unsupported"


def test_a_name_errors_identifier_speaks_for_no_family_but_a_relayed_info_error_is_read():
    assert diagnose_lines(numbered(["NameError: name 'MooncakeStore' is not defined"])).cause == "unknown"
    relayed = (
        "20240930 11:02:44.357479 UTC 8296618 INFO  error: Insufficient Memory"
        " (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"
    )
    assert diagnose_lines(numbered([relayed])).cause == "oom"
    # an INFO line that only talks about memory stays narration
    narration = "INFO 02-03 03:43:49 model_runner.py:629] If you are running out of memory, consider less"
    assert diagnose_lines(numbered([narration])).cause == "unknown"
