"""SGLang's HTTP API on aiohttp: native /generate, OpenAI /v1/*, info, health, metrics, PD bootstrap.

Response shapes follow the pinned SGLang's entrypoints/http_server.py and entrypoints/openai/*;
every JSON body the shape allows carries `"simulated": true`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from sglnode.sim.config import SGLANG_VERSION
from sglnode.sim.engine import (
    DEFAULT_MAX_NEW_TOKENS,
    ROOM_PENDING,
    GenRequest,
    KVTransferError,
    SimEngine,
    TokenEvent,
    count_prompt_tokens,
)
from sglnode.sim.metrics import render_metrics

ENGINE_KEY = web.AppKey("engine", SimEngine)
# Endpoints SGLang serves without the API key.
OPEN_PATHS = frozenset({"/health", "/health_generate", "/metrics"})
HEALTH_GENERATE_TOKENS = 1
OPENAI_COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's (and SGLang's) default for /v1/completions
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _engine(request: web.Request) -> SimEngine:
    return request.app[ENGINE_KEY]


def _error(status: int, message: str) -> web.Response:
    body = {"object": "error", "message": message, "type": HTTPStatus(status).phrase, "code": status}
    return web.json_response({**body, "error": {"message": message}, "simulated": True}, status=status)


@web.middleware
async def access_log_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    engine = _engine(request)
    api_key = engine.config.api_key
    authorized = request.headers.get("Authorization", "") == f"Bearer {api_key}"
    if api_key and request.path not in OPEN_PATHS and not authorized:
        denied = web.json_response({"error": "Unauthorized"}, status=401)
        _log_access(engine, request, denied.status)
        return denied
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        _log_access(engine, request, exc.status)
        raise
    _log_access(engine, request, response.status)
    return response


def _log_access(engine: SimEngine, request: web.Request, status: int) -> None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    client = f"{peer[0]}:{peer[1]}" if peer else "-"
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    engine.log.plain(f'INFO:     {client} - "{request.method} {request.path_qs} HTTP/1.1" {status} {reason}')


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise web.HTTPBadRequest(text=json.dumps({"error": {"message": f"invalid JSON: {exc}"}})) from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": {"message": "expected a JSON object"}}))
    return body


def _gen_request(engine: SimEngine, body: dict[str, Any], prompt: Any, max_new_tokens: int) -> GenRequest:
    room = body.get("bootstrap_room")
    port = body.get("bootstrap_port")
    return GenRequest(
        prompt_tokens=count_prompt_tokens(prompt),
        cached_tokens=engine.cached_prefix(prompt),
        max_new_tokens=max(1, int(max_new_tokens)),
        rid=str(body.get("rid") or uuid.uuid4().hex),
        bootstrap_host=body.get("bootstrap_host"),
        bootstrap_port=int(port) if port is not None else None,
        bootstrap_room=int(room) if room is not None else None,
    )


async def _start_sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await response.prepare(request)
    return response


async def _send(response: web.StreamResponse, payload: dict[str, Any] | str) -> None:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    await response.write(f"data: {data}\n\n".encode())


async def _first_event(
    engine: SimEngine, gen: GenRequest
) -> tuple[AsyncGenerator[TokenEvent, None], TokenEvent | None]:
    """Start generation and get its first token, so PD transfer errors surface before headers go out."""
    stream = engine.generate(gen)
    try:
        first = await stream.__anext__()
    except StopAsyncIteration:
        return stream, None
    return stream, first


async def _chain(first: TokenEvent | None, rest: AsyncIterator[TokenEvent]) -> AsyncIterator[TokenEvent]:
    if first is None:
        return
    yield first
    async for event in rest:
        yield event


# --- native API --------------------------------------------------------------------------------
def _meta(engine: SimEngine, gen: GenRequest, event: TokenEvent) -> dict[str, Any]:
    finish = {"type": "length", "length": event.completion_tokens} if event.finished else None
    return {
        "id": gen.rid,
        "finish_reason": finish,
        "prompt_tokens": event.prompt_tokens,
        "completion_tokens": event.completion_tokens,
        "cached_tokens": event.cached_tokens,
        "e2e_latency": round(event.elapsed_s, 6),
        "weight_version": "default",
        "simulated": True,
    }


async def generate(request: web.Request) -> web.StreamResponse:
    engine = _engine(request)
    body = await _json_body(request)
    params = body.get("sampling_params") or {}
    prompt = body.get("input_ids") if body.get("input_ids") is not None else body.get("text", "")
    gen = _gen_request(engine, body, prompt, params.get("max_new_tokens") or DEFAULT_MAX_NEW_TOKENS)
    try:
        stream, first = await _first_event(engine, gen)
    except KVTransferError as exc:
        return _error(500, f"KVTransferError(bootstrap_room={gen.bootstrap_room}): {exc}")
    try:
        return await _native_response(request, body, gen, stream, first)
    finally:
        # Also on client disconnect: the request leaves the running batch at once.
        await stream.aclose()


async def _native_response(
    request: web.Request,
    body: dict[str, Any],
    gen: GenRequest,
    stream: AsyncGenerator[TokenEvent, None],
    first: TokenEvent | None,
) -> web.StreamResponse:
    engine = _engine(request)
    text = ""
    last = first
    if not body.get("stream"):
        async for event in _chain(first, stream):
            text += event.text
            last = event
        meta = _meta(engine, gen, last) if last else {"id": gen.rid, "simulated": True}
        return web.json_response({"text": text, "meta_info": meta})
    response = await _start_sse(request)
    async for event in _chain(first, stream):
        text += event.text
        await _send(response, {"text": text, "meta_info": _meta(engine, gen, event)})
    await _send(response, "[DONE]")
    await response.write_eof()
    return response


# --- OpenAI-compatible API ------------------------------------------------------------------------
def _usage(event: TokenEvent | None, cache_report: bool = False) -> dict[str, Any]:
    prompt = event.prompt_tokens if event else 0
    completion = event.completion_tokens if event else 0
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cache_report:
        # SGLang reports the radix-cache hit only with --enable-cache-report (openai/usage_processor.py).
        usage["prompt_tokens_details"] = {"cached_tokens": event.cached_tokens if event else 0}
    return usage


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    engine = _engine(request)
    body = await _json_body(request)
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list")
        prompt: Any = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        default_max = DEFAULT_MAX_NEW_TOKENS
    else:
        if "prompt" not in body:
            return _error(400, "prompt is required")
        prompt = body["prompt"]
        default_max = OPENAI_COMPLETIONS_DEFAULT_MAX_TOKENS
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or default_max
    gen = _gen_request(engine, body, prompt, max_tokens)
    try:
        stream, first = await _first_event(engine, gen)
    except KVTransferError as exc:
        return _error(500, f"KVTransferError(bootstrap_room={gen.bootstrap_room}): {exc}")
    try:
        return await _openai_response(request, body, gen, stream, first, chat=chat)
    finally:
        await stream.aclose()


async def _openai_response(
    request: web.Request,
    body: dict[str, Any],
    gen: GenRequest,
    stream: AsyncGenerator[TokenEvent, None],
    first: TokenEvent | None,
    *,
    chat: bool,
) -> web.StreamResponse:
    engine = _engine(request)
    created = int(time.time())
    model = engine.config.served_model_name
    kind = "chat.completion" if chat else "text_completion"

    def choice(text: str, finish: str | None, streaming: bool) -> dict[str, Any]:
        if not chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        key = "delta" if streaming else "message"
        return {
            "index": 0,
            key: {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish,
        }

    envelope = {"id": gen.rid, "created": created, "model": model, "system_fingerprint": "sglnode-sim"}
    if not body.get("stream"):
        text, last = "", first
        async for event in _chain(first, stream):
            text += event.text
            last = event
        return web.json_response(
            {
                **envelope,
                "object": kind,
                "choices": [choice(text, "length", streaming=False)],
                "usage": _usage(last, engine.config.cache_report),
                "simulated": True,
            }
        )
    stream_options = body.get("stream_options") or {}
    include_usage = bool(stream_options.get("include_usage"))
    # SGLang's StreamOptions extension: usage on every chunk, not only in the final one.
    continuous_usage = include_usage and bool(stream_options.get("continuous_usage_stats"))
    chunk_kind = f"{kind}.chunk" if chat else kind
    response = await _start_sse(request)
    last = first
    async for event in _chain(first, stream):
        last = event
        finish = "length" if event.finished else None
        chunk = {**envelope, "object": chunk_kind, "choices": [choice(event.text, finish, streaming=True)]}
        usage = _usage(event, engine.config.cache_report) if continuous_usage else None
        await _send(response, {**chunk, "usage": usage, "simulated": True})
    if include_usage:
        await _send(
            response,
            {
                **envelope,
                "object": chunk_kind,
                "choices": [],
                "usage": _usage(last, engine.config.cache_report),
            },
        )
    await _send(response, "[DONE]")
    await response.write_eof()
    return response


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


# --- info, health, metrics ----------------------------------------------------------------------
async def health(request: web.Request) -> web.Response:
    return web.Response(status=200 if _engine(request).ready else 503)


async def health_generate(request: web.Request) -> web.Response:
    engine = _engine(request)
    if not engine.ready:
        return web.Response(status=503)
    # As SGLang's: one real (here: simulated) generation without PD bootstrap, so a broken KV
    # transfer path does not show here.
    gen = GenRequest(
        prompt_tokens=1, max_new_tokens=HEALTH_GENERATE_TOKENS, rid=f"HEALTH_CHECK_{uuid.uuid4().hex}"
    )
    async for _ in engine.generate(gen):
        pass
    return web.Response(status=200)


def model_info_body(engine: SimEngine) -> dict[str, Any]:
    return {
        "model_path": engine.config.model_path,
        "tokenizer_path": engine.config.args.get("tokenizer_path") or engine.config.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": engine.plan.model.architecture,
        "architectures": [engine.plan.model.architecture],
        "simulated": True,
    }


async def model_info(request: web.Request) -> web.Response:
    return web.json_response(model_info_body(_engine(request)))


def server_info_body(engine: SimEngine) -> dict[str, Any]:
    config = engine.config
    args = {key: value for key, value in config.args.items()}
    args.update(
        host=config.host,
        port=config.port,
        tp_size=engine.plan.server.tp,
        dp_size=engine.plan.server.dp,
        ep_size=engine.plan.server.ep,
        mem_fraction_static=engine.plan.mem_fraction_static,
        disaggregation_mode=config.disaggregation_mode,
        disaggregation_bootstrap_port=config.bootstrap_port,
        served_model_name=config.served_model_name,
        context_length=engine.plan.context_length,
        max_running_requests=engine.max_running_requests,
    )
    state = {
        "max_total_num_tokens": engine.plan.kv_tokens,
        "last_gen_throughput": engine.gen_throughput(),
        "memory_usage": {
            "weight": round(engine.plan.weights_per_gpu_gb, 2),
            "kvcache": round(engine.plan.kv_pool_gb, 2),
        },
    }
    return {
        **args,
        "internal_states": [state],
        "version": SGLANG_VERSION,
        "simulated": True,
        "sglnode_sim": {
            "gpu": config.gpu,
            "model_preset": config.model_preset,
            "time_scale": config.time_scale,
            "faults": config.faults.names(),
            "plan": engine.plan.to_json(),
        },
    }


async def server_info(request: web.Request) -> web.Response:
    return web.json_response(server_info_body(_engine(request)))


async def models(request: web.Request) -> web.Response:
    engine = _engine(request)
    entry = {
        "id": engine.config.served_model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": engine.config.model_path,
        "max_model_len": engine.plan.context_length,
        "simulated": True,
    }
    return web.json_response({"object": "list", "data": [entry]})


async def get_load(request: web.Request) -> web.Response:
    engine = _engine(request)
    load = {"dp_rank": 0, "num_reqs": engine.running + engine.queued, "num_waiting_reqs": engine.queued}
    return web.json_response([{**load, "num_tokens": engine.used_tokens, "simulated": True}])


async def flush_cache(request: web.Request) -> web.Response:
    # The pinned SGLang's entrypoints/http_server.py flush_cache: 200 when the scheduler was idle, else 400.
    if _engine(request).flush_cache():
        return web.Response(
            text="Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n"
        )
    return web.Response(status=HTTPStatus.BAD_REQUEST, text="Flush cache failed.\n")


async def metrics(request: web.Request) -> web.Response:
    engine = _engine(request)
    if not engine.config.metrics_enabled:
        # SGLang mounts /metrics only with --enable-metrics.
        raise web.HTTPNotFound()
    return web.Response(text=render_metrics(engine), content_type="text/plain", charset="utf-8")


def build_app(engine: SimEngine) -> web.Application:
    app = web.Application(middlewares=[access_log_and_auth])
    app[ENGINE_KEY] = engine
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health_generate)
    for path in ("/model_info", "/get_model_info"):
        app.router.add_get(path, model_info)
    for path in ("/server_info", "/get_server_info"):
        app.router.add_get(path, server_info)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/get_load", get_load)
    app.router.add_route("*", "/flush_cache", flush_cache)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


# --- PD bootstrap server (prefill side) ------------------------------------------------------------
async def bootstrap_health(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def bootstrap_route(request: web.Request) -> web.Response:
    engine = _engine(request)
    if request.method == "PUT":
        return web.Response(text="OK")
    return web.json_response(
        {"rank_ip": engine.config.host, "rank_port": engine.config.port, "simulated": True}
    )


async def bootstrap_kv_state(request: web.Request) -> web.Response:
    """Sim-only: the decode side asks whether the prefill side has 'sent' a room's KV."""
    engine = _engine(request)
    room = int(request.match_info["room"])
    return web.json_response({"room": room, "state": engine.rooms.get(room, ROOM_PENDING), "simulated": True})


def build_bootstrap_app(engine: SimEngine) -> web.Application:
    app = web.Application()
    app[ENGINE_KEY] = engine
    app.router.add_get("/health", bootstrap_health)
    app.router.add_route("*", "/route", bootstrap_route)
    app.router.add_get(r"/sglnode_sim/kv/{room:-?\d+}", bootstrap_kv_state)
    return app
