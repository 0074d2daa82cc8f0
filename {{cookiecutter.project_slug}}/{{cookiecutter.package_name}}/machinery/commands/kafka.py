"""`kafka up | down | feed`: a local Kafka broker for development and the demo, fed with the sample events."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..core.settings import ENV_PREFIX, Settings, load_settings
from .arguments import EXIT_BAD_INPUT, EXIT_MISSING_DEPENDENCY, add_settings_argument, non_negative_int, positive_int

DEFAULT_DIR = Path("local-kafka")
LOCAL_HOSTS = ("localhost", "127.0.0.1")


def _saying_kafka_errors(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The handler, with the local broker's failures said in one line (exit 3). A development tool:
    the package zipped for a cluster leaves operations/local_kafka.py out, so it is imported here, late."""

    def handle(args: argparse.Namespace) -> int:
        from ..operations.local_kafka import LocalKafkaError

        try:
            return handler(args)
        except LocalKafkaError as error:
            print(f"kafka error: {error}", file=sys.stderr)
            return EXIT_MISSING_DEPENDENCY

    return handle


def register(commands: argparse._SubParsersAction) -> None:
    kafka = commands.add_parser("kafka", help="a local Kafka broker (up, down) and the sample events fed to it (feed)")
    actions = kafka.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start a local broker on 127.0.0.1 (fetched from Maven Central the first time)")
    add_settings_argument(up)
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="its data and log (default: %(default)s)")
    up.add_argument(
        "--port", type=non_negative_int, help="(default: the port of source.kafka.bootstrap_servers; 0: a free one)"
    )
    up.set_defaults(handler=_saying_kafka_errors(cmd_up))

    down = actions.add_parser("down", help="stop the local broker (its topics stay for the next up)")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="(default: %(default)s)")
    down.set_defaults(handler=_saying_kafka_errors(cmd_down))

    feed = actions.add_parser(
        "feed",
        help="write sample event files (as sample-input does) and produce them to the topics of the settings;"
        " print the overrides that point the job at this broker, one file per micro-batch",
    )
    add_settings_argument(feed)
    feed.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the running broker (default: %(default)s)")
    feed.add_argument("--files", type=positive_int, default=6, help="files to add (default: %(default)s)")
    feed.add_argument("--events-per-file", type=positive_int, default=1000, help="(default: %(default)s)")
    feed.set_defaults(handler=_saying_kafka_errors(cmd_feed))


def cmd_up(args: argparse.Namespace) -> int:
    from ..operations import local_kafka

    port = args.port
    if port is None:
        port = _settings_port(load_settings(args.settings))
        if port is None:
            return EXIT_BAD_INPUT
    broker = local_kafka.start(args.dir, port)
    print(f"kafka: a broker runs at {broker.bootstrap} (data in {args.dir}; `kafka down` stops it)")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from ..operations import local_kafka

    stopped = local_kafka.stop(args.dir)
    print(f"kafka: the broker in {args.dir} {'stopped' if stopped else 'was not running'}")
    return 0


def cmd_feed(args: argparse.Namespace) -> int:
    from ..job.endpoints.sample_input import write_for_settings
    from ..operations import local_kafka

    settings = load_settings(args.settings)
    broker = local_kafka.running(args.dir)
    if broker is None:
        print(f"kafka error: no broker runs in {args.dir}; start one with `kafka up --dir {args.dir}`", file=sys.stderr)
        return EXIT_BAD_INPUT
    topics = _topics(settings)
    if topics is None:
        return EXIT_BAD_INPUT
    landing = {section: Path(source.files.path) for section, source in settings.inputs.items()}
    before = {section: _event_files(folder) for section, folder in landing.items()}
    shape = write_for_settings(settings, args.files, args.events_per_file)
    overrides = [f"{ENV_PREFIX}SOURCE__KAFKA__BOOTSTRAP_SERVERS={broker.bootstrap}"]
    for section, topic in topics.items():
        new = [path for path in _event_files(landing[section]) if path not in before[section]]
        records = [path.read_text(encoding="utf-8").splitlines() for path in new]
        local_kafka.create_topic(broker.bootstrap, topic)
        local_kafka.produce(broker.bootstrap, topic, (line for lines in records for line in lines))
        print(f"kafka: {sum(map(len, records)):,} records ({len(new)} files in {landing[section]}) to {topic}",
              file=sys.stderr)  # fmt: skip
        prefix = f"{ENV_PREFIX}{section.upper()}__KAFKA__"
        if section != "source":
            overrides.append(f"{prefix}BOOTSTRAP_SERVERS={broker.bootstrap}")
        if len({len(lines) for lines in records}) == 1:  # equal files: one file per micro-batch, as the files demo
            overrides.append(f"{prefix}MAX_OFFSETS_PER_TRIGGER={len(records[0])}")
    print(f"kafka: sample shape {shape.describe()}", file=sys.stderr)
    print("\n".join(overrides))
    return 0


def _settings_port(settings: Settings) -> int | None:
    first = settings.source.kafka.bootstrap_servers.split(",")[0]
    host, _, port = first.rpartition(":")
    if host not in LOCAL_HOSTS:
        print(
            f"kafka error: source.kafka.bootstrap_servers {settings.source.kafka.bootstrap_servers} is not this machine;"
            " a local broker listens on 127.0.0.1: give --port, and point the settings at it",
            file=sys.stderr,
        )
        return None
    return int(port)


def _topics(settings: Settings) -> dict[str, str] | None:
    """The one topic of each Kafka input, by settings section (None after saying why not)."""
    topics = {}
    for section, source in settings.inputs.items():
        if source.type != "kafka":
            continue
        topic = source.kafka.topic
        if topic is None or "," in topic:
            print(
                f"kafka error: {section}.kafka.topic is {topic!r}; feed writes to one topic per input: set one name",
                file=sys.stderr,
            )
            return None
        topics[section] = topic
    if not topics:
        print("kafka error: no input of the settings has type kafka; set source.type kafka", file=sys.stderr)
        return None
    return topics


def _event_files(folder: Path) -> list[Path]:
    from ..job.endpoints.sample_input import FILE_PATTERN

    return (
        sorted(path for path in folder.glob("events-*.json") if FILE_PATTERN.match(path.name))
        if folder.is_dir()
        else []
    )
