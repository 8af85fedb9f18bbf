"""`dsh up`, `dsh down`, `dsh status`, `dsh setup`: the local stack (`dsh demo` is demo.py)."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deploy.local.stack import ComponentStatus, LocalStack


def register(commands: Any) -> None:
    up = commands.add_parser(
        "up",
        help="start the local Kafka (KRaft), Redis, the writer and the three projectors; "
        "idempotent",
    )
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    up.add_argument(
        "--no-services",
        action="store_true",
        help="only Kafka and Redis (run `dsh writer` / `dsh project NAME` yourself)",
    )
    up.set_defaults(handler=_up)

    down = commands.add_parser("down", help="stop the local stack; leaves no processes")
    down.set_defaults(handler=_down)

    setup = commands.add_parser(
        "setup", help="install what the local stack runs on (Kafka jars, redis-server); once"
    )
    setup.set_defaults(handler=_setup)

    from deploy.local.kafka import TOOLS

    kafka = commands.add_parser(
        "kafka",
        help="run one of Kafka's own command-line tools against the pipeline's Kafka",
        description="Kafka's tools as its kafka-TOOL.sh scripts run them, on the local stack's "
        "jars; --bootstrap-server is the pipeline's (as `dsh show` resolves it) unless given, "
        "and then so are its DSH_KAFKA_* security settings, unless a --command-config is. "
        "Example: dsh kafka consumer-groups --describe --all-groups",
    )
    kafka.add_argument("tool", choices=sorted(TOOLS), help="the script's name without kafka-")
    kafka.add_argument("args", nargs=argparse.REMAINDER, help="the tool's own arguments")
    kafka.set_defaults(handler=_kafka_tool)

    status = commands.add_parser("status", help="show the local stack's processes and health")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=_status)


def _stack() -> LocalStack:
    """The stack of the state dir, on the ports it was started with (from any shell); a port
    the environment names explicitly wins (`dsh up` then refuses if the stack runs on others)."""
    from deploy.local.record import resolved_settings
    from deploy.local.stack import LocalStack

    return LocalStack(resolved_settings())


def _up(args: argparse.Namespace) -> int:
    stack = _stack()
    started = time.monotonic()
    if not args.json:
        print(f"starting the local stack (state in {stack.settings.state_dir}) ...", flush=True)
    statuses = stack.up(services=not args.no_services)
    if not args.json:
        print(f"ready in {time.monotonic() - started:.1f}s")
        print(f"  Kafka bootstrap servers: {stack.settings.bootstrap_servers()}")
        print(f"  Redis: {stack.settings.redis_url()}")
        if not args.no_services:
            print(f"  service logs: {stack.settings.state_dir / 'services'}/*/service.log")
    return _report(statuses, args.json)


def _setup(args: argparse.Namespace) -> int:
    stack = _stack()
    stack.install()
    print(f"Kafka {stack.settings.kafka_version} jars in {stack.settings.kafka_jars_dir()}")
    print("redis-server installed")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = _stack().down()
    print(f"stopped {stopped} process(es)" if stopped else "nothing was running")
    return 0


def _kafka_tool(args: argparse.Namespace) -> int:
    import subprocess

    from cli.endpoints import kafka_settings
    from deploy.local.kafka import tool_command
    from deploy.local.record import resolved_settings
    from deploy.local.tool_config import client_properties_file, config_flag, java_client_properties

    tool_args = list(args.args)
    if any(a.startswith(("--bootstrap-server", "--bootstrap-controller")) for a in tool_args):
        # Another endpoint (a controller, a plaintext listener): the caller's settings only.
        return subprocess.call(tool_command(resolved_settings(), args.tool, tool_args))
    kafka = kafka_settings()
    tool_args = ["--bootstrap-server", kafka.bootstrap_servers, *tool_args]
    flag = config_flag(args.tool)
    if kafka.security_protocol == "PLAINTEXT" or any(a.startswith(flag) for a in tool_args):
        return subprocess.call(tool_command(resolved_settings(), args.tool, tool_args))
    with client_properties_file(java_client_properties(kafka)) as config:
        argv = tool_command(resolved_settings(), args.tool, [flag, str(config), *tool_args])
        return subprocess.call(argv)


def _status(args: argparse.Namespace) -> int:
    return _report(_stack().status(), args.json)


def _report(statuses: list[ComponentStatus], as_json: bool) -> int:
    healthy = all(s.healthy for s in statuses)
    if as_json:
        print(json.dumps({"healthy": healthy, "components": [s.as_dict() for s in statuses]}))
    else:
        print(f"{'component':<18} {'pid':>8} {'port':>6}  {'health':<9} detail")
        for s in statuses:
            print(f"{s.name:<18} {s.pid or '-':>8} {s.port:>6}  {s.state:<9} {s.detail}")
    return 0 if healthy else 1
