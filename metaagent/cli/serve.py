"""`metaagent-serve`: serve a meta-agent over HTTP — a task in, a designed team out.

    metaagent-serve --model PATH [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                    [--backend hf|vllm|openai] [--base-url URL] [--designer-model M] [--executor-model M]
                    [--frozen-designer TEMPLATE_OR_PATH] [--workers N] [--timeout S] [--record teams.jsonl]

The server listens at once and loads the model in the background (requests get 503 until it is ready;
``GET /healthz`` says when). SIGTERM or SIGINT drain it: new requests get 503, requests in flight finish
(up to ``--graceful-timeout``), then the sandbox workers and models are released and the process exits 0.
Exit status 1 if the model failed to load, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from types import FrameType

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def build_parser() -> argparse.ArgumentParser:
    from metaagent.serve.config import API_KEY_ENV, BACKENDS, DEFAULT_SERVED_NAME, ServeConfig

    d = ServeConfig.__dataclass_fields__
    default = {name: f.default for name, f in d.items()}
    p = argparse.ArgumentParser(prog="metaagent-serve", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    g = p.add_argument_group("models")
    g.add_argument("--model", default=default["model"], help="alias (embedded, embedded-sft, tiny), local HF directory, or upstream model name")
    g.add_argument("--backend", choices=BACKENDS, default=default["backend"])
    g.add_argument("--base-url", help="OpenAI-compatible upstream API root (backend openai)")
    g.add_argument("--designer-model", help="separate designer weights (default: --model)")
    g.add_argument("--executor-model", help="separate executor weights (default: --model)")
    g.add_argument("--frozen-designer", metavar="TEMPLATE_OR_PATH",
                   help="fixed design: a template name (e.g. single_math) or a script file; no designer model is loaded")
    g.add_argument("--device", default=default["device"])
    g.add_argument("--dtype", default=default["dtype"], choices=("float32", "bfloat16", "float16"))
    g.add_argument("--max-batch-size", type=int, default=default["max_batch_size"])
    g.add_argument("--max-wait-ms", type=float, default=default["max_wait_ms"], help="batcher wait for company")
    g.add_argument("--backend-in-flight", type=int, default=default["backend_in_flight"],
                   help="backend calls in flight per model (raise for a remote backend)")
    g.add_argument("--continuous", action="store_true",
                   help="hf: continuous batching (new requests join the running batch); use with --backend-in-flight > 1")
    n = p.add_argument_group("network and security")
    n.add_argument("--host", default=default["host"], help="anything but loopback requires --api-key")
    n.add_argument("--port", type=int, default=default["port"])
    n.add_argument("--api-key", help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})")
    n.add_argument("--served-model-name", default=DEFAULT_SERVED_NAME)
    n.add_argument("--max-request-bytes", type=int, default=default["max_request_bytes"])
    n.add_argument("--max-task-chars", type=int, default=default["max_task_chars"])
    n.add_argument("--max-concurrent-requests", type=int, default=default["max_concurrent_requests"],
                   help="requests in flight at once; more get 429")
    t = p.add_argument_group("teams")
    t.add_argument("--workers", type=int, default=default["sandbox_workers"], help="sandbox worker processes")
    t.add_argument("--timeout", type=float, default=default["request_timeout_s"], help="seconds per request")
    t.add_argument("--script-timeout", type=float, default=default["script_timeout_s"],
                   help="seconds a script may run on its own (agent calls not counted)")
    t.add_argument("--max-designs", type=int, default=default["max_designs"])
    t.add_argument("--max-executions", type=int, default=default["max_executions"])
    t.add_argument("--max-tokens", type=int, help="executor tokens per agent turn (default 512)")
    t.add_argument("--designer-max-tokens", type=int, help="designer tokens per design (default 768)")
    t.add_argument("--temperature", type=float, help="default temperature of designer and executor (default 0.7)")
    t.add_argument("--max-tokens-cap", type=int, default=default["max_tokens_cap"])
    t.add_argument("--k-templates", type=int, default=default["k_templates"])
    t.add_argument("--record", metavar="PATH", help="append every team as a RolloutTree to this JSONL file")
    o = p.add_argument_group("process")
    o.add_argument("--graceful-timeout", type=float, default=default["graceful_timeout_s"])
    o.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    return p


def config_from_args(args: argparse.Namespace):
    from metaagent.serve.config import (
        API_KEY_ENV,
        ServeConfig,
        _default_designer_sampling,
        _default_executor_sampling,
    )

    designer, executor = _default_designer_sampling(), _default_executor_sampling()
    if args.temperature is not None:
        designer.temperature = executor.temperature = args.temperature
    if args.max_tokens is not None:
        executor.max_tokens = args.max_tokens
    if args.designer_max_tokens is not None:
        designer.max_tokens = args.designer_max_tokens
    designer.__post_init__()
    executor.__post_init__()
    return ServeConfig(
        model=args.model, backend=args.backend, base_url=args.base_url, designer_model=args.designer_model,
        executor_model=args.executor_model, frozen_designer=args.frozen_designer, device=args.device,
        dtype=args.dtype, max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms,
        backend_in_flight=args.backend_in_flight, continuous=args.continuous, host=args.host, port=args.port,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None, served_model_name=args.served_model_name,
        max_request_bytes=args.max_request_bytes, max_task_chars=args.max_task_chars,
        max_concurrent_requests=args.max_concurrent_requests, sandbox_workers=args.workers,
        script_timeout_s=args.script_timeout, request_timeout_s=args.timeout, max_designs=args.max_designs,
        max_executions=args.max_executions, max_tokens_cap=args.max_tokens_cap, k_templates=args.k_templates,
        designer_sampling=designer, executor_sampling=executor, record=args.record,
        graceful_timeout_s=args.graceful_timeout,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from metaagent.serve import TeamService, create_app

    try:
        config = config_from_args(args)
        service = TeamService(config)
    except ValueError as e:  # ConfigError, a bad --frozen-designer, ...
        print(f"metaagent-serve: error: {e}", file=sys.stderr)
        return 2

    class Server(uvicorn.Server):
        load_failed = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            service.begin_drain()  # 503 for new requests from now on; requests in flight finish
            super().handle_exit(sig, frame)

        def fail(self, error: BaseException) -> None:
            self.load_failed = True
            self.should_exit = True

    holder: list[Server] = []
    app = create_app(service, on_load_failure=lambda e: holder[0].fail(e))
    server = Server(
        uvicorn.Config(
            app, host=config.host, port=config.port, log_level=args.log_level, lifespan="on",
            timeout_graceful_shutdown=config.graceful_timeout_s, access_log=args.log_level == "debug",
        )
    )  # fmt: skip
    holder.append(server)
    # uvicorn re-raises the signal that stopped it once it is done; a no-op handler makes that a clean exit
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run()
    if server.load_failed:
        print(f"metaagent-serve: error: the model failed to load: {service.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
