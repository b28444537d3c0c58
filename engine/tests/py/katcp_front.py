"""The engine's katcp front as an aiokatcp client sees it: every request, every sensor, sampling
strategies, refusals. Run by engine/src/control/katcp/tests.rs against a front over a test
controller whose counters that test sets and moves on (see there); prints "changes N" and "refusals M" for it to
check against the commands the pipeline got and the refusals the engine counted.

usage: katcp_front.py PORT
"""
import asyncio
import sys

import aiokatcp

SYNC = 1e9  # the test engine's --sync-time
FS = 1e6  # its sample rate


class Recorder(aiokatcp.Client):
    """Keeps every #sensor-status as (name, status, value)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates = []

    def inform_sensor_status(self, timestamp: float, count: int, name: str, status: str, value: str) -> None:
        self.updates.append((name, status, value))

    def of(self, name):
        return [(s, v) for (n, s, v) in self.updates if n == name]


async def value(client, name):
    """A sensor's (status, value) through ?sensor-value."""
    reply, informs = await client.request("sensor-value", name)
    assert reply == [b"1"], reply
    (inform,) = informs
    args = [a.decode() for a in inform.arguments]
    assert args[1] == "1" and args[2] == name, args
    return args[3], args[4]


async def gains(client, stream, pol):
    reply, _ = await client.request("gain", stream, pol)
    return [g.decode() for g in reply]


async def refused(client, kind, want, *req):
    """The request is refused (FailReply, or InvalidReply for an unknown request) with one
    sentence that starts with `want`."""
    try:
        await client.request(*req)
    except kind as e:
        text = str(e)
        assert text.startswith(want), f"{req}: {text!r} should start {want!r}"
        assert text.endswith(".") and "\n" not in text, f"{req}: {text!r} is not one sentence"
        return
    raise AssertionError(f"{req} was not refused")


async def settle(client, name, want, timeout=3.0):
    """Waits until sensor `name` reads `want` (the sensors refresh every 0.5 s)."""
    for _ in range(int(timeout / 0.05)):
        got = await value(client, name)
        if got == want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} is {got}, not {want}")


async def main(port):
    c = await asyncio.wait_for(Recorder.connect("127.0.0.1", port), 5)
    changes = refusals = 0

    # The standard requests.
    await c.request("watchdog")
    reply, informs = await c.request("help")
    helped = {i.arguments[0].decode() for i in informs}
    for name in ["gain", "gain-all", "delays", "halt", "sensor-sampling", "sensor-value", "sensor-list",
                 "version-list", "client-list", "log-level", "watchdog", "help"]:
        assert name in helped, name
    reply, informs = await c.request("version-list")
    versions = {i.arguments[0]: i.arguments[1] for i in informs}
    assert versions[b"katcp-protocol"] == b"5.1-MIB" and versions[b"katcp-device"] == b"katgpucbf-fgpu-1.0", versions
    reply, _ = await c.request("client-list")
    assert reply == [b"1"], reply
    reply, _ = await c.request("log-level", "info")
    assert reply == [b"info"], reply

    # Every sensor listed, with katgpucbf's names and types.
    reply, informs = await c.request("sensor-list")
    types = {i.arguments[0].decode(): i.arguments[3].decode() for i in informs}
    want_types = {
        "steady-state-timestamp": "integer", "device-status": "discrete", "rx.device-status": "discrete",
    }
    for p in (0, 1):
        want_types.update({
            f"input{p}.dig-clip-cnt": "integer", f"input{p}.dig-rms-dbfs": "float",
            f"input{p}.rx.timestamp": "integer", f"input{p}.rx.unixtime": "timestamp",
            f"input{p}.rx.missing-unixtime": "timestamp",
        })
        for out in ("wide", "nb"):
            want_types.update({
                f"{out}.input{p}.eq": "string", f"{out}.input{p}.delay": "string",
                f"{out}.input{p}.feng-clip-cnt": "integer",
            })
    for out in ("wide", "nb"):
        want_types[f"{out}.dither-seed"] = "string"
    assert types == want_types, set(types) ^ set(want_types)
    _, informs = await c.request("sensor-list", "input0.dig-rms-dbfs")
    assert informs[0].arguments[2] == b"dBFS"

    # The counters the test set, as katgpucbf's sensors.
    assert await value(c, "input0.dig-clip-cnt") == ("nominal", "900")
    assert await value(c, "input1.dig-clip-cnt") == ("nominal", "0")
    status, db = await value(c, "input1.dig-rms-dbfs")
    assert status == "error" and abs(float(db)) < 0.01, (status, db)
    assert (await value(c, "input0.dig-rms-dbfs"))[0] == "unknown"
    # The test's feed moves the newest timestamp on and loses a heap of input1 every 0.1 s.
    status, ts = await value(c, "input0.rx.timestamp")
    assert status == "nominal" and int(ts) >= 4096000 and int(ts) % 1024 == 0, (status, ts)
    status, t = await value(c, "input0.rx.unixtime")
    assert status == "nominal" and SYNC + 4.096 <= float(t) < SYNC + 60, (status, t)
    status, t = await value(c, "input1.rx.missing-unixtime")
    assert status == "error" and SYNC + 4.096 <= float(t) < SYNC + 60, (status, t)
    assert await value(c, "input0.rx.missing-unixtime") == ("nominal", "-1.0")
    assert await value(c, "rx.device-status") == ("warn", "degraded")
    assert await value(c, "device-status") == ("warn", "degraded")
    assert await value(c, "wide.input1.feng-clip-cnt") == ("nominal", "3")
    assert await value(c, "nb.input1.feng-clip-cnt") == ("nominal", "0")
    status, seed = await value(c, "wide.dither-seed")
    assert status == "nominal" and seed.isdigit(), seed
    assert await value(c, "wide.input0.delay") == ("nominal", "(0, 0.0, 0.0, 0.0, 0.0)")
    assert await value(c, "steady-state-timestamp") == ("nominal", "0")
    default = await gains(c, "wide", 0)
    assert len(default) == 1 and complex(default[0]).imag == 0, default
    assert await value(c, "wide.input0.eq") == ("nominal", f"[{default[0]}]")

    # Sampling: event and auto send the reading now, then each change; period keeps sending.
    reply, _ = await c.request("sensor-sampling", "wide.input0.eq", "event")
    assert reply == [b"wide.input0.eq", b"event"], reply
    reply, _ = await c.request("sensor-sampling", "nb.input1.eq,input0.dig-clip-cnt", "auto")
    assert reply == [b"nb.input1.eq,input0.dig-clip-cnt", b"auto"], reply
    reply, _ = await c.request("sensor-sampling", "input1.dig-clip-cnt", "period", "0.1")
    assert reply == [b"input1.dig-clip-cnt", b"period", b"0.1"], reply
    for strategy in (["differential", "5"], ["event-rate", "0.5", "10"], ["differential-rate", "1", "0.5", "10"]):
        reply, _ = await c.request("sensor-sampling", "wide.input1.feng-clip-cnt", *strategy)
        assert [a.decode() for a in reply[1:2]] == strategy[:1], reply
    reply, _ = await c.request("sensor-sampling", "wide.input1.feng-clip-cnt", "none")
    reply, _ = await c.request("sensor-sampling", "wide.input0.eq")
    assert reply == [b"wide.input0.eq", b"event"], reply

    # The requests: query, set one input, set both, restore, delays.
    await c.request("gain", "wide", "0", "0.5-0.25j")
    changes += 1
    assert await gains(c, "wide", 0) == ["0.5-0.25j"]
    assert await gains(c, "wide", 1) == default
    assert await value(c, "wide.input0.eq") == ("nominal", "[0.5-0.25j]")
    steady = int((await value(c, "steady-state-timestamp"))[1])
    assert steady > 4096000, steady
    per_channel = [f"{k}+{k}j" for k in range(64)]
    await c.request("gain", "nb", "1", *per_channel)
    changes += 1
    got = await gains(c, "nb", 1)
    assert [complex(g) for g in got] == [complex(g) for g in per_channel], got
    await c.request("gain-all", "wide", "2")
    changes += 2
    assert await gains(c, "wide", 0) == ["2+0j"] and await gains(c, "wide", 1) == ["2+0j"]
    await c.request("gain-all", "wide", "default")
    changes += 2
    assert await gains(c, "wide", 0) == default
    await c.request("delays", "wide", repr(SYNC + 5), "1e-4,0:0.5,0", "2e-4,1e-9:0,3")
    changes += 2
    for out in ("wide", "nb"):
        assert await value(c, f"{out}.input0.delay") == ("nominal", "(5000000, 0.0001, 0.0, 0.5, 0.0)")
        assert await value(c, f"{out}.input1.delay") == ("nominal", "(5000000, 0.0002, 1e-09, 0.0, 3.0)")
    assert int((await value(c, "steady-state-timestamp"))[1]) >= 5000000

    # What the samplers sent: the readings at once, then each change of the gains.
    await asyncio.sleep(0.5)
    eq = c.of("wide.input0.eq")
    assert [v for _, v in eq] == [f"[{default[0]}]", "[0.5-0.25j]", "[2+0j]", f"[{default[0]}]"], eq
    assert len(c.of("nb.input1.eq")) == 2, c.of("nb.input1.eq")
    assert c.of("input0.dig-clip-cnt") == [("nominal", "900")], c.of("input0.dig-clip-cnt")
    assert len(c.of("input1.dig-clip-cnt")) >= 5, c.of("input1.dig-clip-cnt")
    await c.request("sensor-sampling", "input1.dig-clip-cnt", "none")

    # Bad requests: one sentence each, nothing changed.
    before = [await gains(c, "wide", p) for p in (0, 1)] + [await gains(c, "nb", p) for p in (0, 1)]
    delay_before = await value(c, "wide.input0.delay")
    F, I = aiokatcp.FailReply, aiokatcp.InvalidReply
    for kind, want, req in [
        (I, 'there is no request named "frobnicate"', ["frobnicate"]),
        (F, "?gain takes an output name, an input (0 or 1)", ["gain"]),
        (F, "?gain takes an output name, an input (0 or 1)", ["gain", "wide"]),
        (F, 'this engine has no output named "nope"; its outputs are: wide, nb.', ["gain", "nope", "0"]),
        (F, 'input "2" is not 0 or 1.', ["gain", "wide", "2", "1"]),
        (F, 'gain "x" is not a complex number', ["gain", "wide", "0", "x"]),
        (F, "pol0 has 2 gains; give one per channel (16) or a single value.", ["gain", "wide", "0", "1", "2"]),
        (F, "pol1 gain inf is not a finite number.", ["gain", "wide", "1", "inf"]),
        (F, "?gain-all takes an output name and gains", ["gain-all", "wide"]),
        (F, "pol0 gain NaN is not a finite number.", ["gain-all", "wide", "nan"]),
        (F, "pol0 has 3 gains; give one per channel (64) or a single value.", ["gain-all", "nb", "1", "2", "3"]),
        (F, "?delays takes an output name, a start time", ["delays", "wide", repr(SYNC), "0,0:0,0"]),
        (F, 'start time "soon" is not a Unix time in seconds.', ["delays", "wide", "soon", "0,0:0,0", "0,0:0,0"]),
        (F, 'pol0 delay "1,2" is not "delay,delay_rate:phase,phase_rate" (numbers).', ["delays", "wide", repr(SYNC), "1,2", "0,0:0,0"]),
        (F, "pol1 delay 1 s is beyond --max-delay (0.001 s) in size.", ["delays", "wide", repr(SYNC), "0,0:0,0", "1,0:0,0"]),
        (F, "load_time 5 is not a Unix time after the sync time 1000000000.", ["delays", "wide", "5", "0,0:0,0", "0,0:0,0"]),
        (F, 'this engine has no output named "nope"', ["delays", "nope", repr(SYNC), "0,0:0,0", "0,0:0,0"]),
    ]:
        await refused(c, kind, want, *req)
        if req[0] != "frobnicate":
            refusals += 1
    # The standard requests' own refusals.
    await refused(c, F, 'there is no sensor named "nope".', "sensor-value", "nope")
    await refused(c, F, '"sometimes" is not a sampling strategy', "sensor-sampling", "wide.input0.eq", "sometimes")
    await refused(c, F, "strategy period: period \"0\" is not", "sensor-sampling", "wide.input0.eq", "period", "0")
    await refused(c, F, "strategy differential needs an integer, float or timestamp sensor.", "sensor-sampling", "wide.input0.eq", "differential", "1")
    await refused(c, F, "strategy event-rate takes 2 parameter(s)", "sensor-sampling", "input0.dig-clip-cnt", "event-rate", "1")
    await refused(c, F, '"loud" is not a log level', "log-level", "loud")
    after = [await gains(c, "wide", p) for p in (0, 1)] + [await gains(c, "nb", p) for p in (0, 1)]
    assert after == before, "a refused request changed the gains"
    assert await value(c, "wide.input0.delay") == delay_before, "a refused request changed the delays"
    reply, _ = await c.request("sensor-sampling", "wide.input0.eq")
    assert reply == [b"wide.input0.eq", b"event"], "a refused strategy replaced the one in force"

    # ?halt asks the engine to stop; the test checks that it did.
    await c.request("halt")
    c.close()
    await c.wait_closed()
    print(f"changes {changes}")
    print(f"refusals {refusals}")


asyncio.run(main(int(sys.argv[1])))
