"""Writes the seed inputs of the fuzz targets (run from spead/fuzz: python3 seeds/make_seeds.py)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def ptr(ident, value, immediate=True):
    return struct.pack(">Q", (1 << 63 if immediate else 0) | (ident << 48) | value)


def packet(cnt, size, offset, payload, extra=b""):
    items = [ptr(0x1, cnt), ptr(0x2, size), ptr(0x3, offset), ptr(0x4, len(payload))]
    items = b"".join(items) + extra
    n = len(items) // 8
    return bytes([0x53, 4, 2, 6, 0, 0]) + struct.pack(">H", n) + items + payload


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# decode: a digitiser packet (timestamp, digitiser id and status, samples), a descriptor heap.
adc = ptr(0x1600, 4096) + ptr(0x3101, 0) + ptr(0x3102, 0) + ptr(0x3300, 0, immediate=False)
write("decode", "digitiser", packet(1, 64, 0, bytes(range(64)), adc))
desc = b"\x53\x04\x02\x06\x00\x00\x00\x03" + ptr(0x1600, 0) + ptr(0x3300, 0, False) + ptr(0x5, 0, False)
write("decode", "descriptor-ish", desc + bytes(40))
write("decode", "stop", packet(2, 0, 0, b"", ptr(0x6, 2)))

# assemble: 4 configuration bytes, then datagrams separated by ff fe.
ts = lambda t: ptr(0x1600, t)
heaps = [packet(t, 32, o, bytes([t]) * 16, ts(t)) for t in range(6) for o in (0, 16)]
write("assemble", "two-packet-heaps", bytes([0x13, 0x03, 0x1f, 0x0f]) + b"\xff\xfe".join(heaps))
write("assemble", "by-counter", bytes([0x13, 0x03, 0x1f, 0x8f]) + b"\xff\xfe".join(heaps[::-1]))

# chunk_placement: configuration (slots 4, window 2, max jump 64; 32-byte slots of 16-byte
# packets; 3 buffers), then packet operations (op, chunk delta, slot, index, heap, flaws).
cfg = bytes([0x8B, 31, 16, 0x03])
ops = b"".join(bytes([0, c, s, i, 4 * c + s, 0]) for c in range(3) for s in range(4) for i in range(2))
write("chunk_placement", "three-chunks", cfg + ops)
write("chunk_placement", "from-caller", bytes([0x8B, 31, 16, 0x8B]) + ops + bytes([5, 5, 6, 1, 7, 9]) + ops)
write("chunk_placement", "flaws", cfg + bytes([0, 0, 0, 0, 0, 0x10, 1, 1, 1, 1, 1, 1, 2, 0, 4, 0, 0, 2,
                                               3, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xc]))

# engine_delays: a settings byte, then the body.
for i, body in enumerate([
    '{"pol0": {"delay": 1e-4, "phase": 0.5}, "pol1": "2e-4,0:0.1,0", "load_timestamp": 1000}',
    '{"pol0": "1e-4,1e-9:0.5,0.01", "pol1": {"delay": 0, "delay_rate": 0, "phase": 0, "phase_rate": 0}}',
    '{"pol1": {"delay": -5e-4, "delay_rate": -1e-12, "phase": 3.14, "phase_rate": -0.5}, "load_time": 1700000001.5}',
]):
    write("engine_delays", f"body{i}", bytes([0x10]) + body.encode())

# engine_gains: a channels byte (3: 4 channels), then the body.
for i, body in enumerate([
    '{"pol0": 0.5, "pol1": [1, -1]}',
    '{"pol0": [[1, 0], [0.5, 0.5], [0, 1], [-1e-3, 2]]}',
    '{"pol1": 3.4e38}',
]):
    write("engine_gains", f"body{i}", bytes([3]) + body.encode())

# dsim_signal: a settings byte (rate 1e6), then the body.
for i, body in enumerate([
    '{"pol0": {"components": [{"kind": "tone", "frequency": 1.5e5, "amplitude": 0.5}, {"kind": "noise", "rms": 0.05, "seed": 1}]}, "pol1": {"components": [{"kind": "comb", "start": 1e3, "spacing": 1e4, "count": 8, "amplitude": 0.1}], "delay": 2.5, "dither": false}, "seed": 3}',
    '{"tones": [{"frequency": 1.5e5, "amplitude": 0.5}], "noise": 0.05, "dither": true, "delays": [0, 2.5], "seed": 1}',
    '{"pol0": null, "seed": 5}',
    '{"noise": 0.1}',
]):
    write("dsim_signal", f"body{i}", bytes([1]) + body.encode())

# dsim_faults: a seed byte, then the body.
for i, body in enumerate([
    '{"pol0": {"drop": {"probability": 0.01, "heaps": [1000], "ranges": [[2000, 2010]]}, "duplicate": {"heaps": [5000]}, "reorder": {"heaps": [6000], "window": 3}, "corrupt": {"probability": 1e-4}}, "pol1": {}}',
    '{"pol1": {"drop": {"heaps": [3]}, "duplicate": {"probability": 1}, "reorder": {"heaps": [3, 4], "window": 2}, "corrupt": {"ranges": [[0, 10]]}}}',
]):
    write("dsim_faults", f"body{i}", bytes([7]) + body.encode())

# katcp_line: requests, replies and informs as aiokatcp writes them, escapes and ids included.
for i, line in enumerate([
    "?sensor-sampling[7] input0.rx.timestamp,device-status event-rate 1.0 inf",
    "?gain wideband 0 1+2j 0.5-0.25j",
    "?delays wideband 1700000000.5 1e-9,0:0.1,0 0,0:0,0",
    "#sensor-status 1700000000.25 1 wideband.input0.eq nominal [1+0j]",
    "!help[2147483647] ok a\\_b\\\\c\\0\\n\\r\\e\\t \\@",
]):
    write("katcp_line", f"line{i}", line)
