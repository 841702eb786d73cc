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
import dataclasses
import logging
import os
import signal
import sys
from types import FrameType

from metaagent.cli.flags import (
    Parser,
    add_config_flags,
    add_debug_flag,
    config_values,
    load_flat_config,
    run_main,
)
from metaagent.config import ConfigError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


#: the flags of earlier releases, kept as aliases of their fields
ALIASES = {
    "--workers": "sandbox_workers",
    "--timeout": "request_timeout_s",
    "--script-timeout": "script_timeout_s",
    "--graceful-timeout": "graceful_timeout_s",
}


def build_parser() -> argparse.ArgumentParser:
    from metaagent.policy.factory import MODEL_BACKENDS
    from metaagent.serve.config import API_KEY_ENV, ServeConfig

    p = Parser(prog="metaagent-serve", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--config", "-c", help="YAML file of ServeConfig fields (flags override it)")
    p.add_argument("--max-tokens", type=int, help="shortcut: executor_sampling.max_tokens (executor tokens per turn)")
    p.add_argument("--designer-max-tokens", type=int, help="shortcut: designer_sampling.max_tokens")
    p.add_argument("--temperature", type=float, help="shortcut: the default temperature of designer and executor")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    add_debug_flag(p)
    add_config_flags(
        p,
        ServeConfig,
        aliases=ALIASES,
        choices={"backend": MODEL_BACKENDS, "dtype": ("float32", "bfloat16", "float16")},
        title=f"ServeConfig fields (api_key defaults to ${API_KEY_ENV})",
    )
    return p


def config_from_args(args: argparse.Namespace):
    from metaagent.serve.config import API_KEY_ENV, ServeConfig

    values = config_values(args)
    sampling = {"designer_sampling": {}, "executor_sampling": {}}
    if args.temperature is not None:
        sampling["designer_sampling"]["temperature"] = sampling["executor_sampling"]["temperature"] = args.temperature
    if args.max_tokens is not None:
        sampling["executor_sampling"]["max_tokens"] = args.max_tokens
    if args.designer_max_tokens is not None:
        sampling["designer_sampling"]["max_tokens"] = args.designer_max_tokens
    defaults = ServeConfig()
    for key, changes in sampling.items():
        if changes:
            base = dict(values.get(key) or dataclasses.asdict(getattr(defaults, key)))
            values[key] = {**base, **changes}
    values["api_key"] = values.get("api_key") or os.environ.get(API_KEY_ENV) or None  # --api-key, else $ENV
    return load_flat_config(ServeConfig, args.config, argparse.Namespace(), **values)


def main(argv: list[str] | None = None) -> int:
    return run_main("metaagent-serve", _main, argv)


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from metaagent.serve import TeamService, create_app

    config = config_from_args(args)
    try:
        service = TeamService(config)
    except ValueError as e:  # a bad --frozen-designer, ...
        raise ConfigError(str(e)) from e

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
