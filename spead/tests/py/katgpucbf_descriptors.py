"""Decodes our descriptor heaps with spead2, and katgpucbf's for the same streams, and prints
both item sets as JSON for a Rust test to compare.

Usage: katgpucbf_descriptors.py PORT_FILE HEAP_SAMPLES SAMPLE_BITS CHANNELS SPECTRA OUT_BITS...

Binds an ephemeral port, writes it to PORT_FILE, then takes one heap per item set until a stop
heap: the digitiser stream's descriptors, then the F-engine output's for each OUT_BITS. The
reference heaps are built as katgpucbf builds them with spead2's ItemGroup (its dsim's
descriptors.create_descriptors_heap and its fgpu's send.make_descriptor_heap), and decoded by
spead2 like ours.
"""
import json
import os
import socket
import sys

import numpy as np
import spead2
import spead2.recv
import spead2.send

FLAVOUR = spead2.Flavour(4, 64, 48, 0)
IMMEDIATE_FORMAT = [("u", FLAVOUR.heap_address_bits)]

port_file = sys.argv[1]
heap_samples, sample_bits, channels, spectra = (int(a) for a in sys.argv[2:6])
out_bits = [int(a) for a in sys.argv[6:]]


def katgpucbf_digitiser() -> spead2.send.Heap:
    ig = spead2.send.ItemGroup(flavour=FLAVOUR)
    ig.add_item(0x1600, "timestamp", "Timestamp", shape=(), format=IMMEDIATE_FORMAT)
    ig.add_item(0x3101, "digitiser_id", "Digitiser Serial Number", shape=(), format=IMMEDIATE_FORMAT)
    ig.add_item(0x3102, "digitiser_status", "Digitiser Status values", shape=(), format=IMMEDIATE_FORMAT)
    ig.add_item(0x3300, "adc_samples", "Digitiser Raw ADC Sample Data", shape=(heap_samples,),
                format=[("i", sample_bits)])
    return ig.get_heap(descriptors="all", data="none")


def katgpucbf_f_engine(bits: int) -> spead2.send.Heap:
    raw_kwargs = {"shape": (channels, spectra, 2, 2)}
    try:
        raw_kwargs["dtype"] = np.dtype(f"int{bits}")
    except TypeError:
        # The number of bits doesn't neatly fit a numpy dtype
        raw_kwargs["format"] = [("i", bits)]
    ig = spead2.send.ItemGroup(flavour=FLAVOUR)
    ig.add_item(0x1600, "timestamp", "Timestamp", shape=(), format=IMMEDIATE_FORMAT)
    ig.add_item(0x4101, "feng_id", "F-engine id", shape=(), format=IMMEDIATE_FORMAT)
    ig.add_item(0x4103, "frequency", "First channel", shape=(), format=IMMEDIATE_FORMAT)
    ig.add_item(0x4300, "feng_raw", "Channelised data", **raw_kwargs)
    return ig.get_heap(descriptors="all", data="none")


def items_of(heap) -> dict:
    """What a spead2 receiver makes of one descriptor heap."""
    ig = spead2.ItemGroup()
    ig.update(heap)
    return {
        name: {
            "id": item.id,
            "shape": list(item.shape),
            "dtype": str(item.dtype) if item.dtype is not None else None,
            "format": [list(f) for f in item.format] if item.format else None,
        }
        for name, item in ig.items()
    }


def decode_locally(heaps) -> list:
    thread_pool = spead2.ThreadPool()
    queue = spead2.InprocQueue()
    tx = spead2.send.InprocStream(thread_pool, [queue])
    for heap in heaps:
        tx.send_heap(heap)
    queue.stop()
    rx = spead2.recv.Stream(thread_pool)
    rx.add_inproc_reader(queue)
    got = [items_of(heap) for heap in rx]
    rx.stop()
    return got


stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=4))
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
stream.add_udp_reader(sock, max_size=9200)
with open(port_file + ".tmp", "w") as f:
    f.write(str(sock.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
ours = [items_of(heap) for heap in stream]
stream.stop()
reference = decode_locally([katgpucbf_digitiser()] + [katgpucbf_f_engine(b) for b in out_bits])
print(json.dumps({"ours": ours, "katgpucbf": reference}))
