"""?signals and its sensors as an aiokatcp client (katgpucbf's own tooling) sees them. Run by
dsim/tests/katcp.rs against a running dsim's katcp front.

usage: katcp_signals.py PORT
"""
import asyncio
import sys

import aiokatcp


async def main(port: int) -> None:
    client = await aiokatcp.Client.connect("127.0.0.1", port)
    try:
        max_period = int(await client.sensor_value("max-period"))
        spec = "n = wgn(0.05, 3); n + cw(0.1, 1e6); n;"
        (timestamp,), _ = await client.request("signals", spec, max_period // 2)
        timestamp = int(timestamp)
        assert await client.sensor_value("signals-orig", str) == spec
        canonical = "(wgn(0.05, 3) + cw(0.1, 1000000.0)); wgn(0.05, 3);"
        assert await client.sensor_value("signals", str) == canonical, await client.sensor_value("signals", str)
        assert int(await client.sensor_value("period")) == max_period // 2
        assert int(await client.sensor_value("steady-state-timestamp")) == timestamp
        for bad, sentence in [
            ("cw(0.1, 1e6)", "at character 13: expected ';' after the expression, found the end of the spec."),
            ("x;", "at character 1: unknown variable 'x' (a variable must be defined before it is used)."),
        ]:
            try:
                await client.request("signals", bad)
            except aiokatcp.FailReply as e:
                assert str(e) == sentence, str(e)
            else:
                raise AssertionError(f"{bad!r} was accepted")
        assert await client.sensor_value("signals", str) == canonical
        print("ok", timestamp)
    finally:
        client.close()
        await client.wait_closed()


asyncio.run(main(int(sys.argv[1])))
