"""Receives both polarisations of a dsim run with spead2 and prints what it decoded as JSON,
for a Rust test to check. Usage: recv_dsim.py HEAPS BITS HEAP_SAMPLES FFT_LEN

Binds two ephemeral ports on 127.0.0.1 and prints "PORTS p0 p1" when ready; then receives until
each stream's stop heap and prints one JSON line.
"""
import json
import socket
import sys

import numpy as np
import spead2
import spead2.recv

heaps, bits, heap_samples, fft_len = (int(a) for a in sys.argv[1:5])

streams, ports = [], []
for _ in range(2):
    stream = spead2.recv.Stream(
        spead2.ThreadPool(),
        spead2.recv.StreamConfig(max_heaps=4),
        spead2.recv.RingStreamConfig(heaps=heaps + 16),
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("127.0.0.1", 0))
    stream.add_udp_reader(sock, max_size=9200)
    streams.append(stream)
    ports.append(sock.getsockname()[1])
print("PORTS", *ports, flush=True)


def unpack(raw: np.ndarray) -> np.ndarray:
    """Signed big-endian-bit-order samples of `bits` bits."""
    b = np.unpackbits(raw)[: len(raw) * 8 // bits * bits].reshape(-1, bits).astype(np.int64)
    v = b @ (1 << np.arange(bits - 1, -1, -1))
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)


out = []
for stream in streams:
    got = []
    for heap in stream:
        items = {item.id: item for item in heap.get_items()}
        if 0x1600 not in items:
            continue
        got.append({
            "cnt": heap.cnt,
            "ts": items[0x1600].immediate_value,
            "id": items[0x3101].immediate_value,
            "status": items[0x3102].immediate_value,
            "samples": unpack(np.frombuffer(items[0x3300], dtype=np.uint8)),
        })
    got.sort(key=lambda h: h["ts"])
    ts = [h["ts"] for h in got]
    x = np.concatenate([h["samples"] for h in got])
    spec = np.abs(np.fft.rfft(x[:fft_len]))
    peak = int(np.argmax(spec[1:]) + 1)
    out.append({
        "count": len(got),
        "first_ts": ts[0] if ts else None,
        "contiguous": all(b - a == heap_samples for a, b in zip(ts, ts[1:])),
        "cnt_is_ts_over_heap_samples": all(h["cnt"] * heap_samples == h["ts"] for h in got),
        "ids": sorted({h["id"] for h in got}),
        "statuses": sorted({h["status"] for h in got}),
        "samples_per_heap": sorted({len(h["samples"]) for h in got}),
        "peak_bin": peak,
        "peak_amplitude": float(2 * spec[peak] / fft_len / (1 << (bits - 1))),
        "first_samples": x[:8].tolist(),
    })
print(json.dumps(out), flush=True)
