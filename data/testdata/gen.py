"""Writes the small Arrow/Parquet fixtures data's tests read.

Run from anywhere: python3 data/testdata/gen.py [OUTDIR]
(pip install pyarrow). The files are committed, so `go test` needs no
Python; TestFixturesRegenerate reruns this into a temp dir when python3 and
pyarrow are present and checks the Go reader gets the same tokens from both.

  tokens.arrow       Arrow IPC *stream* (like Hugging Face datasets'
                     data-00000-of-00001.arrow): input_ids list<int32>, text string
  tokens64.arrow     Arrow IPC *file* format, input_ids list<int64>
  tokens.parquet     the same rows as tokens.arrow, Parquet
  flat.parquet       a flat int64 column "ids"
  badtype.parquet    input_ids as list<string>: a wrong column type
"""
import os
import sys

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

rows = [[(7 * r + 3 * i) % 50 for i in range(5 + r % 4)] for r in range(12)]
text = ["doc %d" % r for r in range(12)]

t32 = pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int32())), "text": text})
with ipc.new_stream(os.path.join(out, "tokens.arrow"), t32.schema) as w:
    # two record batches, as a dataset written in chunks has
    for b in t32.to_batches(max_chunksize=5):
        w.write_batch(b)

t64 = pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int64()))})
with ipc.new_file(os.path.join(out, "tokens64.arrow"), t64.schema) as w:
    w.write_table(t64)

pq.write_table(t32, os.path.join(out, "tokens.parquet"), row_group_size=5)
flat = [t for r in rows for t in r]
pq.write_table(pa.table({"ids": pa.array(flat, type=pa.int64())}), os.path.join(out, "flat.parquet"))
pq.write_table(pa.table({"input_ids": pa.array([["a", "b"], ["c"]])}), os.path.join(out, "badtype.parquet"))
