"""Receives heaps with spead2 and prints what it decoded as JSON, for a Rust test to check.

Usage: recv_heaps.py PORT_FILE. Binds an ephemeral port, writes it to PORT_FILE, then receives
until a stop heap.
"""
import json
import socket
import sys

import spead2
import spead2.recv

stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=4))
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
stream.add_udp_reader(sock, max_size=9200)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(sock.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
ig = spead2.ItemGroup()
heaps = []
for heap in stream:
    ig.update(heap)
    heaps.append({
        name: {"id": item.id, "shape": list(item.shape), "dtype": str(item.dtype) if item.dtype is not None else None,
               "value": (item.value.tolist() if hasattr(item.value, "tolist") else item.value)}
        for name, item in ig.items() if item.value is not None
    })
print(json.dumps(heaps))
# Stop the stream before interpreter shutdown stops its thread pool (see send_heaps.py).
stream.stop()
