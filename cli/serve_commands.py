"""`dsh serve`: the HTTP API (``serve``), run by uvicorn until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the HTTP API: append, read and follow sessions from any language",
        description="Settings: DSH_SERVE_* (address, limits, tokens and tenants), DSH_KAFKA_* "
        "and DSH_REDIS_* (the pipeline), DSH_PROJECTOR_KEY_PREFIX (the read models' keys) and "
        "DSH_LOG_*. The API and its errors: docs/http-api.md; its OpenAPI document: "
        "docs/openapi.json (and /docs while it runs).",
    )
    serve.add_argument("--host", default=None, help="address to listen on (DSH_SERVE_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port (DSH_SERVE_PORT)")
    serve.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR (default DSH_LOG_LEVEL)"
    )
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401  (the app's framework: checked here, named in the error)
        import uvicorn
    except ImportError as exc:
        from serve.errors import ServeDependencyError

        raise ServeDependencyError(
            f"dsh serve needs the serve extra ({exc.name} is missing): "
            "pip install 'dsh-pipeline[serve]'"
        ) from None

    from cli.endpoints import kafka_settings, redis_settings
    from projectors.keys import Keys
    from projectors.settings import ProjectorSettings
    from serve.app import create_app
    from serve.settings import ServeSettings
    from servicekit.logs import configure_logging

    logs = configure_logging("serve", args.log_level)
    settings = ServeSettings()
    app = create_app(
        settings, kafka_settings(), redis_settings(), Keys(ProjectorSettings().key_prefix)
    )
    uvicorn.run(
        app,
        host=args.host or settings.host,
        port=settings.port if args.port is None else args.port,
        log_level=logs.level.lower(),
        log_config=None,  # our handler (configure_logging), not uvicorn's own
        server_header=False,
    )
    return 0
