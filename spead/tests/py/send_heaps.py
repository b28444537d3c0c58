"""Sends heaps with spead2 (the reference implementation) for our receiver to decode.

Usage: send_heaps.py PORT. Sends 3 data heaps, each with descriptors, then a stop heap.
"""
import sys

import numpy as np
import spead2
import spead2.send

port = int(sys.argv[1])
flavour = spead2.Flavour(4, 64, 48, 0)
config = spead2.send.StreamConfig(max_packet_size=1500, rate=0)
thread_pool = spead2.ThreadPool()
stream = spead2.send.UdpStream(thread_pool, [("127.0.0.1", port)], config)
ig = spead2.send.ItemGroup(flavour=flavour)
ig.add_item(0x1600, "timestamp", "ADC sample count", shape=(), format=[("u", 48)])
ig.add_item(0x4300, "raw", "int8 array", shape=(3, 4), dtype=np.int8)
ig.add_item(0x4301, "wide", "int16 matrix", shape=(40, 50), dtype=">i2")
for k in range(3):
    ig["timestamp"].value = 1000 + k
    ig["raw"].value = (np.arange(12, dtype=np.int8) * (k + 1)).reshape(3, 4)
    ig["wide"].value = (np.arange(2000, dtype=np.int16) - 1000 * k).reshape(40, 50)
    stream.send_heap(ig.get_heap(descriptors="all", data="all"))
stream.send_heap(ig.get_end())
# Destroy the stream while its thread pool still runs: left to interpreter shutdown, the pool can
# be stopped first and the stream's destructor then waits forever (spead2 issue 251). CI saw this
# script hang once in many runs.
del stream
del thread_pool
