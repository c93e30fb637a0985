"""Drives `cairn mcp` with the official MCP Python SDK (PyPI package `mcp`): lists the tools
and calls each one.

Usage: python client.py CAIRN_BINARY DATA_DIR TREE_DIR; prints OK on success, raises otherwise.
The data directory already holds a table `people` (made by the test before the session).
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    assert result.content and result.content[0].type == "text", result
    return result.content[0].text


def data(result):
    """The tool's result: its JSON text, which is also its structured content."""
    value = json.loads(text(result))
    assert result.structuredContent == value, (result.structuredContent, value)
    return value


async def main(binary, data_dir, tree):
    params = StdioServerParameters(command=binary, args=["--dir", data_dir, "mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.serverInfo.name == "cairn", init
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"add", "search", "grep", "get", "ls", "tag", "versions", "meta",
                                  "snapshot", "diff", "table_query"}, tools
            assert tools["search"].inputSchema["required"] == ["query"]
            called = set()

            async def call(name, args):
                called.add(name)
                return await session.call_tool(name, args)

            r = await call("add", {"name": "notes/raft.md", "content": "# Raft\nLeader election and log replication.\n", "tags": ["consensus"], "meta": {"source": "sdk"}})
            assert not r.isError, r
            assert data(r)["docs"][0]["status"] == "added"
            r = await call("add", {"name": "notes/lsm.md", "content": "LSM trees batch writes with group commit.\n"})
            assert not r.isError, r
            r = await call("add", {"name": "notes/lsm.md", "content": "LSM trees batch writes with group commit and fsync.\n"})
            assert data(r)["docs"][0]["status"] == "new_version"
            r = await call("add", {"name": "/etc/passwd", "content": "x"})
            assert r.isError and data(r)["error"]["kind"] == "bad_request", r

            r = await call("search", {"query": "leader election", "limit": 5})
            hits = data(r)["hits"]
            assert hits[0]["path"] == "notes/raft.md", hits
            r = await call("search", {"query": "group commit", "filter": {"tags": ["consensus"]}})
            assert data(r)["hits"] == [], text(r)  # filtered out: no hits

            r = await call("grep", {"pattern": "REPLICATION", "ignore_case": True})
            files = data(r)["files"]
            assert files[0]["path"] == "notes/raft.md" and files[0]["lines"][0]["line"] == 2, files

            r = await call("get", {"doc": "notes/lsm.md", "version": 1})
            assert data(r)["content"]["text"] == "LSM trees batch writes with group commit.\n", text(r)
            r = await call("get", {"doc": "notes/missing.md"})
            assert r.isError and "no document" in data(r)["error"]["message"], r

            r = await call("versions", {"doc": "notes/lsm.md"})
            assert [v["version"] for v in data(r)["versions"]] == [1, 2], text(r)
            r = await call("meta", {"doc": "notes/raft.md", "key": "source"})
            assert data(r)["value"] == "sdk", text(r)

            r = await call("tag", {"docs": ["notes/lsm.md"], "add": ["storage"]})
            assert not r.isError, r
            r = await call("ls", {"filter": {"tags": ["storage"]}})
            assert [d["path"] for d in data(r)["docs"]] == ["notes/lsm.md"], text(r)
            r = await call("ls", {"filter": {"meta": {"source": "sdk"}}, "limit": 1})
            listed = data(r)
            assert [d["path"] for d in listed["docs"]] == ["notes/raft.md"] and not listed["truncated"], listed
            r = await call("ls", {"limit": 1})
            assert data(r)["truncated"] and data(r)["total"] == 2, text(r)

            r = await call("snapshot", {"source": tree, "name": "t1"})
            assert data(r)["snapshot"]["files"] == 1, text(r)
            with open(os.path.join(tree, "second.txt"), "w") as f:
                f.write("second file\n")
            r = await call("snapshot", {"source": tree, "name": "t2"})
            assert not r.isError, r
            r = await call("diff", {"a": "t1", "b": "t2"})
            assert data(r)["changes"] == [{"change": "added", "path": "second.txt"}], text(r)

            r = await call("table_query", {"table": "people", "filter": "age=gt=40", "fields": ["name"]})
            assert data(r)["records"] == [{"name": "Alan"}], text(r)

            r = await session.call_tool("search", {})
            assert r.isError, r
            assert called == set(tools), set(tools) - called
    print("OK")


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
