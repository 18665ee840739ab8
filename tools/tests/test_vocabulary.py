"""The family-vocabulary fallback (diagnosis/vocabulary.yaml): used only when no rule matched."""

import pytest

from sglnode.diagnosis.diagnose import Diagnoser, diagnose_lines, numbered
from sglnode.diagnosis.rulebook import LogLineLike, RuleError, load_vocabulary, parse_vocabulary

VOCABULARY = load_vocabulary()
CASES = [(f.cause, line, True) for f in VOCABULARY.families for line in f.examples] + [
    (f.cause, line, False) for f in VOCABULARY.families for line in f.negative_examples
]


@pytest.mark.parametrize(("cause", "line", "claimed"), CASES)
def test_family_claims_its_examples_and_not_its_negatives(cause, line, claimed):
    assert VOCABULARY.is_error_line(line)
    found = VOCABULARY.classify([LogLineLike(line)])
    assert (found is not None and found[0].cause == cause) is claimed


def test_a_crash_in_a_familys_own_words_is_named_with_medium_confidence():
    lines = numbered(
        [
            "[2026-11-29 10:00:00 TP0] Load weight begin. avail mem=93.61 GB",
            "E1203 12:00:01.000 transfer_engine.cpp:88] Failed to open the RDMA device mlx5_0 for NIXL",
            "[2026-11-29 10:00:02] Received sigquit from a child process. It usually means the child failed.",
        ]
    )
    diagnosis = diagnose_lines(lines)
    assert (diagnosis.cause, diagnosis.rule_id, diagnosis.confidence) == (
        "kv_transfer",
        "vocabulary-kv_transfer",
        "medium",
    )
    assert [line.line_no for line in diagnosis.evidence if "RDMA" in line.text] == [2]
    assert "vocabulary" in diagnosis.notes[0]


def test_no_vocabulary_ever_names_a_gpu_oom():
    data = {
        "error_line": "error",
        "families": [{"cause": "oom", "evidence": "x", "fix": "x", "words": ["memory"], "examples": []}],
    }
    with pytest.raises(RuleError, match="not allowed"):
        parse_vocabulary(data)
    memory_words = numbered(["RuntimeError: failed to register memory region with the allocator: error 12"])
    assert diagnose_lines(memory_words).cause != "oom"


def test_traceback_source_lines_are_not_error_lines():
    # "timeout=timeout" is code quoted under a frame, not a timeout.
    lines = numbered(
        [
            "Traceback (most recent call last):",
            '  File "/x/worker.py", line 10, in get',
            "    values = worker.get_objects(object_refs, timeout=timeout)",
            "KeyboardInterrupt",
        ]
    )
    assert diagnose_lines(lines).cause == "unknown"


def test_a_cuda_fault_claims_no_family_and_says_how_to_find_the_kernel():
    lines = numbered(
        [
            "[rank1]:[E1209 02:28:15] ProcessGroupNCCL.cpp:2057] Process group watchdog thread "
            "terminated with exception: CUDA error: an illegal memory access was encountered",
        ]
    )
    diagnosis = diagnose_lines(lines)
    assert diagnosis.cause == "unknown"
    assert "CUDA_LAUNCH_BLOCKING=1" in diagnosis.notes[0] and "illegal memory access" in diagnosis.notes[0]


def test_a_server_that_came_up_and_stayed_up_is_not_diagnosed_from_routine_lines():
    lines = numbered(
        [
            "[2026-11-29 09:00:05 TP7] Ignore import error when loading sglang.srt.models.x: No module 'x'",
            "[2026-11-29 09:00:09 TP0] WARNING: request timed out on the client side",
            "[2026-11-29 09:00:22] The server is fired up and ready to roll!",
        ]
    )
    assert diagnose_lines(lines).cause == "unknown"


def test_errors_after_the_server_came_up_still_name_their_family():
    # A PD transfer fails per request while /health stays 200: no kill line, the server stays up.
    lines = numbered(
        [
            "[2026-11-29 09:00:22] The server is fired up and ready to roll!",
            "E0423 16:34:48.930759 217301 tcp_transport.cpp:393] TcpTransport: ASIO exception: connect: "
            "Connection refused",
        ]
    )
    assert _vocabulary_only(lines).cause == "kv_transfer"


def _vocabulary_only(lines):
    diagnoser = Diagnoser(rules=())
    diagnoser.feed_all(lines)
    return diagnoser.result()


def test_errors_the_server_survived_before_it_came_up_are_not_a_diagnosis():
    lines = numbered(
        [
            "E0423 16:34:48.930759 217301 tcp_transport.cpp:393] TcpTransport: ASIO exception: connect: "
            "Connection refused",
            "[2026-11-29 09:00:22] The server is fired up and ready to roll!",
        ]
    )
    assert _vocabulary_only(lines).cause == "unknown"


def test_a_line_speaks_for_its_most_specific_family_only():
    # torch's NCCL watchdog line says "timeout" too: it is an NCCL line, not also a watchdog one.
    lines = [
        LogLineLike(
            "[rank4]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE) ran for 600049 milliseconds"
        ),
        LogLineLike("RuntimeError: Timed out after 300 s waiting for the scheduler to respond"),
        LogLineLike("[E304 12:54:52] Timeout at NCCL work: 151721, last enqueued NCCL work: 151721"),
    ]
    found = VOCABULARY.classify(lines)
    assert found is not None and found[0].cause == "nccl"


def test_nccl_info_lines_are_narration_not_errors():
    assert not VOCABULARY.is_error_line(
        "node:4280:5850 [5] NCCL INFO NVLS multicast support is not available on dev 5"
    )
    assert VOCABULARY.is_error_line(
        "node:1234:1290 [0] NCCL WARN socketProgress: Connection closed by remote peer"
    )


def test_a_warning_whose_message_is_on_the_next_line_is_read_with_it():
    # torch/cuda/__init__.py warns "UserWarning:" and prints the capability message on the next line.
    lines = numbered(
        [
            "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:283: UserWarning:",
            "    Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.",
            "[2026-01-01 00:00:01] Received sigquit from a child process. It usually means the child failed.",
        ]
    )
    assert _vocabulary_only(lines).cause == "arch_unsupported"


def test_an_exception_right_under_a_frame_without_source_is_an_error_line():
    # A frame with no source line to quote (<stdin>, a compiled module): the exception follows it.
    lines = numbered(
        [
            "Traceback (most recent call last):",
            '  File "<stdin>", line 1, in <module>',
            "RuntimeError: CUDA error: CUBLAS_STATUS_ARCH_MISMATCH when calling cublasLtMatmul",
            "[2026-01-01 00:00:01] Received sigquit from a child process. It usually means the child failed.",
        ]
    )
    assert _vocabulary_only(lines).cause == "arch_unsupported"


def test_a_debug_line_narrates_what_was_skipped_and_is_no_error_line():
    # NATTEN logs every backend it cannot use at DEBUG before its real error; "Hopper" there is no cause.
    assert not VOCABULARY.is_error_line(
        "[natten.utils.checks][DEBUG] - Can't run Hopper FNA; not a CUDA tensor."
    )
    assert VOCABULARY.is_error_line("2026-01-01 DEBUG worker ERROR: failed to open /dev/nvidia0")
    assert VOCABULARY.is_error_line("[ERR!] GPU Compute Capability is lower than it is required")


def test_a_traceback_cut_inside_an_arch_gate_names_arch_support():
    site = "/opt/venv/lib/python3.12/site-packages/flashinfer"
    cut = [
        "Traceback (most recent call last):",
        f'  File "{site}/jit/core.py", line 413, in gen_jit_spec',
        "    check_cuda_arch()",
        f'  File "{site}/jit/core.py", line 108, in check_cuda_arch',
        '    raise RuntimeError("FlashInfer requires GPUs',
    ]
    diagnosis = diagnose_lines(numbered(cut))
    assert (diagnosis.cause, diagnosis.rule_id, diagnosis.confidence) == (
        "arch_unsupported",
        "code-arch_unsupported",
        "low",
    )
    assert "ends inside a traceback" in diagnosis.notes[0]
    # The same frame far above the end of the log is history, not where it stopped.
    later = [*cut, "INFO: retrying with the triton backend", "INFO: server ready", "INFO: request done"]
    assert diagnose_lines(numbered(later)).cause == "unknown"


def test_indented_lines_under_an_error_continue_its_message():
    # AITER's RuntimeError spreads its message over indented lines; the family's words are on the last.
    lines = [
        "RuntimeError: [AITER] /workspace/aiter_meta/csrc/opus_gemm/opus_gemm.cu:540",
        "  splitk workspace not initialized for the current CUDA stream.",
        "  (and warm with the largest expected gemm) before HIP graph capture.",
    ]
    assert diagnose_lines(numbered(lines)).cause == "cuda_graph_capture"
    # A line that is not indented ends the message: its words are its own.
    assert diagnose_lines(numbered([lines[0], "note: graph capture is enabled"])).cause == "unknown"


def test_warnings_do_not_name_the_family_when_the_log_has_an_error_of_its_own():
    warning = (
        "2025-12-20 04:38:00 - gpustack.worker.backends.vllm - WARNING - Extended KV cache for vLLM is only "
        "supported on NVIDIA and AMD GPUs. Skipping LMCache configuration."
    )
    error = "2025-12-20 04:38:00 - gpustack.worker.serve_manager - ERROR - Failed to get vLLM backend image"
    assert diagnose_lines(numbered([warning, error])).cause == "unknown"
    # Alone, a warning in a family's words still names it (the log may hold nothing else)...
    refusal = warning.replace(" Skipping LMCache configuration.", "").replace("cache", "cache (LMCache)")
    assert diagnose_lines(numbered([refusal])).cause == "kv_transfer"
    # ...unless it says what the program does instead: the server went on without it.
    assert diagnose_lines(numbered([warning])).cause == "unknown"
    # NCCL's WARN is its error level, not a note.
    nccl_warn = "node1:1234:1290 [0] NCCL WARN socketProgress: Connection closed by remote peer node2<49152>"
    assert diagnose_lines(numbered([nccl_warn, error])).cause == "nccl"


def test_a_launch_command_naming_timeout_flags_is_no_timeout():
    command = (
        "command: python -m sglang.launch_server --model-path /models/ds --tp 4 --nccl-init 0.0.0.0:5000 "
        "--watchdog-timeout 1000 --dist-timeout 3600"
    )
    lines = [command, "[2026-04-26 20:56:39 TP3] Load weight begin. avail mem=138.67 GB"]
    assert diagnose_lines(numbered(lines)).cause == "unknown"
    assert VOCABULARY.is_error_line("RuntimeError: NCCL timeout after 3600 s")


def test_a_refusal_printed_before_a_cuda_fault_names_its_family_and_one_after_does_not():
    refusal = "RuntimeError: fused kernel is not available for compute capability 12.0 on this build"
    fault = "RuntimeError: CUDA error: unspecified launch failure"
    assert diagnose_lines(numbered([refusal, fault])).cause == "arch_unsupported"
    # After the fault, words are its echo: the fault names no cause.
    assert diagnose_lines(numbered([fault, refusal])).cause == "unknown"


def test_vllms_state_dump_before_a_fatal_error_is_no_error_line():
    # dump_input.py prints the scheduler's state (requests, kv_transfer_params) before the traceback;
    # the failure is the traceback's, whatever words the dumped state holds.
    dump = (
        "(EngineCore_DP0 pid=999197) ERROR 11-01 12:31:40 [dump_input.py:79] NewRequestData(req_id=x, "
        "kv_transfer_params=None, error=None)"
    )
    assert not VOCABULARY.is_error_line(dump)
    assert VOCABULARY.is_error_line(dump.replace("[dump_input.py:79]", "[core.py:710]"))
