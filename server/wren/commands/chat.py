"""Chat with the assistant in text (one message with -m, else an interactive prompt).

Text turns go through the same conversation core as the devices: the same engines, tools, history and
per-session lock. The session key is `cli:direct` unless -s names another; using a device's key
(`xiaozhi:<device-id>`) continues that device's conversation. It runs the agent in this process on the
config's data dir (not over `POST /api/chat`), so it needs no API key: whoever can read the data dir can
read the conversations anyway.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from wren.config import ConfigError, load_config

DEFAULT_SESSION = "cli:direct"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-s", "--session", default=DEFAULT_SESSION,
                        help=f"session key whose history to use (default {DEFAULT_SESSION})")
    parser.add_argument("-m", "--message", help="send one message, print the reply and exit")
    parser.add_argument("--config", help="TOML config file (default: $WREN_CONFIG, else built-in defaults)")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default WARNING)")


async def _one_turn(agent: object, text: str, session: str) -> None:
    from wren.agent.events import TextChunk
    from wren.agent.loop import AgentLoop
    from wren.agent.messages import InboundMessage

    assert isinstance(agent, AgentLoop)
    channel, _, chat_id = session.partition(":")
    msg = InboundMessage(channel=channel or "cli", sender_id="user", chat_id=chat_id or "direct",
                         content=text, session_key_override=session)
    async for event in agent.begin_turn(msg):
        if isinstance(event, TextChunk):
            sys.stdout.write(event.text)
            sys.stdout.flush()
    sys.stdout.write("\n")


async def _chat(args: argparse.Namespace) -> int:
    from wren.agent.loop import AgentLoop

    agent = AgentLoop.from_config(load_config(args.config))
    await agent.start()
    try:
        if args.message is not None:
            await _one_turn(agent, args.message, args.session)
            return 0
        interactive = sys.stdin.isatty()
        if interactive:
            print(f"Wren chat, session {args.session}. Ctrl-D to quit.")
        while True:
            try:
                line = await asyncio.to_thread(input, "> " if interactive else "")
            except EOFError:
                break
            if line.strip():
                await _one_turn(agent, line.strip(), args.session)
        return 0
    finally:
        await agent.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return asyncio.run(_chat(args))
    except ConfigError as exc:
        print(f"wren chat: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
