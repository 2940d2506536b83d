"""Drives the server binary with the official Python MCP SDK (`mcp` on PyPI), in both
protocol eras it offers, over stdio and over Streamable HTTP, as a second, independent
client beside rmcp's.

Usage: python tests/interop/python_sdk.py path/to/mcp-code-sandbox
"""

import asyncio
import base64
import contextlib
import logging
import os
import re
import subprocess
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters, stdio_client

BINARY = sys.argv[1]


class Warnings(logging.Handler):
    """Keeps what the SDK warns of: a clean run warns of nothing (a session's end
    answered with a status the client does not take is logged, not raised)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.said = []

    def emit(self, record):
        self.said.append(record.getMessage())


WARNINGS = Warnings()
logging.getLogger("mcp").addHandler(WARNINGS)


def server_env(root):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", root),
           "SANDBOX_ROOT": os.path.join(root, "sandboxes"), "SANDBOX_LOG": "warn"}
    if "SANDBOX_CACHE_DIR" in os.environ:
        env["SANDBOX_CACHE_DIR"] = os.environ["SANDBOX_CACHE_DIR"]
    return env


def server_params(root):
    return StdioServerParameters(command=BINARY, args=[], env=server_env(root))


@contextlib.contextmanager
def http_server(root):
    """The binary serving MCP over HTTP on a free loopback port; yields its URL."""
    env = dict(server_env(root), SANDBOX_LOG="info")
    proc = subprocess.Popen([BINARY, "serve", "--http", "127.0.0.1:0"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            found = re.search(r"serving MCP at (\S+)", line)
            if found:
                yield found.group(1)
                break
        else:
            raise RuntimeError("the server did not start serving HTTP")
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, "the server did not shut down cleanly"


async def exercise(session):
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert len(tools) == 11 and "fork_sandbox" in tools, sorted(tools)
    for tool in tools.values():
        assert tool.output_schema, tool.name

    created = await session.call_tool("create_sandbox", {"session_id": "interop"})
    assert not created.is_error, created
    assert created.structured_content["created"] is True

    await session.call_tool("execute_code", {"session_id": "interop", "code": "y = 40"})
    value = await session.call_tool("execute_code", {"session_id": "interop", "code": "y + 2"})
    assert value.structured_content["value"] == "42", value
    assert "Out: 42" in value.content[0].text

    error = await session.call_tool("execute_code", {"session_id": "interop", "code": "1/0"})
    assert error.is_error and error.structured_content["error"]["name"] == "ZeroDivisionError"

    blob = bytes(range(256))
    up = await session.call_tool("upload_file", {
        "session_id": "interop", "file_name": "b.bin", "destination_path": "/in",
        "file_content": base64.b64encode(blob).decode(), "encoding": "base64"})
    assert not up.is_error, up
    back = await session.call_tool("read_file", {"session_id": "interop", "file_path": "/in/b.bin"})
    assert base64.b64decode(back.structured_content["content"]) == blob

    unknown = await session.call_tool("read_file", {"session_id": "nobody", "file_path": "x"})
    assert unknown.is_error and "no sandbox" in unknown.content[0].text

    escape = await session.call_tool("read_file", {"session_id": "interop", "file_path": "../x"})
    assert escape.is_error and "outside the sandbox" in escape.content[0].text

    closed = await session.call_tool("close_sandbox", {"session_id": "interop"})
    assert closed.structured_content["closed"] is True


async def main():
    with tempfile.TemporaryDirectory() as root:
        async with stdio_client(server_params(root)) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.server_info.name == "mcp-code-sandbox"
                await exercise(session)
                print(f"python sdk, legacy handshake ({init.protocol_version}): ok")
        try:
            from mcp import Client
        except ImportError:
            print("python sdk has no high-level Client; the auto era is skipped")
            return
        async with Client(server_params(root), mode="auto") as client:
            await exercise(client.session)
            print(f"python sdk, auto era ({client.session.protocol_version}): ok")
        with http_server(root) as url:
            for mode in ("legacy", "auto"):
                async with Client(url, mode=mode) as client:
                    await exercise(client.session)
                    print(f"python sdk over HTTP, {mode} ({client.session.protocol_version}): ok")
    assert not WARNINGS.said, f"the SDK warned: {WARNINGS.said}"


asyncio.run(main())
