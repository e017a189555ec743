"""The parameter server's tensor wire format: envelopes of tensors chunked into Kafka message values.

One logical message (`Envelope`: run, kind, worker, seq, model version, plain meta, tensors) becomes one or
more chunks. Each chunk is one Kafka value: a fixed little-endian header, the run name, then the chunk's
slice of the message body.

Header (`struct` format "<4sBBBBIQqIIQQQIH", 66 bytes):

    magic        4s   b"ESPS"
    version      u8   WIRE_VERSION (2)
    kind         u8   index in KINDS ("push", "pull", "hello", "reply")
    flags        u8   bit 0: the body holds sparse tensors; other bits must be 0
    reserved     u8   0
    worker       u32  worker rank
    seq          u64  push: the push id; pull/hello: the request id; reply: the id of the request it answers
    model ver.   i64  push: the version it was computed on; reply: the version of the model sent
    chunk        u32  this chunk's index, 0 .. nchunks-1
    nchunks      u32  chunks of the message (1 .. max(1, body_len))
    body_len     u64  length of the whole (reassembled) body
    body_sum     u64  the body's checksum: XXH3-64 of the message's slice sums (see below), each as a
                      little-endian u64, in chunk order
    chunk_sum    u64  this whole value's checksum: XXH3-64 of the header (this field zeroed) and the run name,
                      seeded with the slice sum, so a damaged header, run name or slice is caught alike
    chunk_len    u32  length of this chunk's slice of the body
    run_len      u16  length of the run name (1 .. 255)

then the run name (utf-8, `run_len` bytes), then the slice (`chunk_len` bytes). A message of body length
B cut at `max_bytes` has ceil(B / max_bytes) chunks (one when B is 0); chunk i holds body[i*max_bytes:
(i+1)*max_bytes]. A chunk's slice sum is XXH3-64 of its slice (seed 0).

Checksums: each side reads every body byte once for them (the slice sums; the chunk and body sums are
derived from those), and XXH3 runs at several GB/s, so a 45 MB model costs milliseconds, not the ~70 ms
per side of the two CRC-32 passes of wire version 1. (Kafka's own record-batch CRC-32C guards the bytes
between client and broker; these sums make every chunk self-checking from the producer to the reader.)

Body: u32 meta length, meta JSON (utf-8, compact, `Infinity`/`NaN` allowed): {"m": the caller's meta,
"t": the tensor table}, then the tensors' raw little-endian bytes in table order. A table entry is
{"dtype": "float32" | "float64" | "float16" | "bfloat16" | "int64" | "int32" | "int16" | "int8" | "uint8" |
"bool", "shape": [...], "layout": "dense" | "sparse", "nnz": k}. A dense tensor is its numel*itemsize bytes
(row-major); a sparse one is k flat indices (int32; int64 when numel >= 2**31), ascending, then its k
values in its dtype; decoding scatters them into zeros. The sparse layout is chosen (with `sparse=True`)
for floating tensors at most a third non-zero whose sparse form is smaller; "zero" is bitwise (+0.0
only), so -0.0 and NaN survive and every round trip is bit-exact. The table's sizes must add up to the
body length exactly.

A model's floating buffers (BatchNorm running statistics; edgestream.sync.buffers) ride in the same body:
a push or reply whose caller meta holds "buffers": k ends its tensors with the model's k floating
buffers (`split_buffers`); a message without the key carries none, so a model without floating buffers
sends exactly the bytes it did before.

Never pickle: JSON and raw arrays only. Whatever bytes arrive, decoding raises nothing but `WireError`
(its str() is the one-line reason), and nothing of a rejected chunk is kept.
"""

from __future__ import annotations

# The format's two halves: frames.py (header, encode, peek) and reassembly.py (chunks back into messages).
from edgestream.ps.frames import (  # noqa: F401 - the wire's names, here where the format is written down
    _HEAD,
    _SUM_AT,
    DEFAULT_CHUNK_BYTES,
    KINDS,
    MAGIC,
    WIRE_VERSION,
    Envelope,
    Header,
    WireError,
    _frame,
    _pack_chunk,
    chunks,
    encode,
    peek,
    split_buffers,
    tensor_bytes,
)
from edgestream.ps.reassembly import Reassembler, decode_one  # noqa: F401
