#!/usr/bin/env python3
"""Counts SPEAD heaps on one multicast group over lo for SECONDS, with the kit's spead2.

    python3 tools/rx-count.py [SECONDS] [GROUP] [PORT]     (defaults 1, 239.10.0.0, 7148)

Checks that multicast on lo carries dsim's stream (239.10.0.0: pol 0's first group; 1/8 of a
polarisation's heaps, ADC_RATE / 4096 / 8 a second) or fgpu's output (239.10.1.0). Run it while
run-fgpu.sh runs, with PYTHONPATH as install.sh says.
"""
import sys
import threading
import time

import spead2
import spead2.recv

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
group = sys.argv[2] if len(sys.argv) > 2 else "239.10.0.0"
port = int(sys.argv[3]) if len(sys.argv) > 3 else 7148
stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=8))
stream.add_udp_reader(group, port, max_size=9200, buffer_size=32 << 20, interface_address="127.0.0.1")
t0 = time.monotonic()
# Stopping the stream ends the loop below, heaps or none.
threading.Timer(seconds, stream.stop).start()
n = 0
for heap in stream:
    n += 1
print(f"{n} heaps on {group}:{port} in {time.monotonic() - t0:.2f} s")
