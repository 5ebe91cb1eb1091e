"""Writes the PyTorch checkpoints tests/it/hostile_inputs.rs mutates, and hand-made hostile
ones, into the folder given as argv[1]:

- zip.pth, legacy.pth: a training checkpoint ({'state_dict': OrderedDict, 'epoch',
  'nested': lists, tuples, dicts}) in torch.save's zip and legacy formats;
- deep_list_zip.pth, deep_list_legacy.pth, deep_tuple_zip.pth, deep_dict_zip.pth: pickles
  nesting 200000 lists / tuples / dicts;
- self_list_zip.pth: a list that contains itself;
- numel_2e62_zip.pth, numel_1tb_zip.pth: a float storage declaring 2^62 elements and one
  declaring 1 TB (2^38 floats) over a few bytes of data;
- deflate_4gb_zip.pth: data.pkl compressed, its uncompressed size patched to 4 GiB - 1.
"""

import collections
import io
import pickle
import struct
import sys
import zipfile

import torch

out = sys.argv[1]
torch.manual_seed(0)
sd = collections.OrderedDict()
sd["conv.weight"] = torch.randn(4, 3, 3, 3)
sd["bn.weight"] = torch.rand(4)
sd["bn.running_mean"] = torch.zeros(4)
sd["bn.num_batches_tracked"] = torch.tensor(3)
obj = {
    "state_dict": sd,
    "epoch": 7,
    "nested": [[1, 2.5, "x"], {"a": (1, None, True)}, (sd["bn.weight"],)],
}
torch.save(obj, f"{out}/zip.pth")
torch.save(obj, f"{out}/legacy.pth", _use_new_zipfile_serialization=False)

DEPTH = 200000


def zip_with(name, pkl, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(f"{out}/{name}", "w", compression=compress) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")


def legacy_with(name, pkl):
    magic = 0x1950A86A20F9469CFC6C
    with open(f"{out}/{name}", "wb") as f:
        pickle.dump(magic, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump({"protocol_version": 1001, "little_endian": True}, f, protocol=2)
        f.write(pkl)
        pickle.dump([], f, protocol=2)


proto = b"\x80\x02"
deep_list = proto + b"]" * DEPTH + b"a" * (DEPTH - 1) + b"."
zip_with("deep_list_zip.pth", deep_list)
legacy_with("deep_list_legacy.pth", deep_list)
zip_with("deep_tuple_zip.pth", proto + b")" + b"\x85" * DEPTH + b".")
# {'k': {'k': ...}}: DEPTH empty dicts, then DEPTH-1 times (key, SETITEM).
deep_dict = proto + b"}" + b"(X\x01\x00\x00\x00k}" * DEPTH + b"u" * DEPTH + b"."
zip_with("deep_dict_zip.pth", deep_dict)
# l = []; l.append(l): EMPTY_LIST, BINPUT 0, BINGET 0, APPEND.
zip_with("self_list_zip.pth", proto + b"]q\x00h\x00a.")


def storage_pickle(numel):
    # {'w': torch._utils._rebuild_tensor_v2(('storage', FloatStorage, '0', 'cpu', numel),
    #                                       0, (numel,), (1,), False, OrderedDict())}
    p = bytearray(proto)
    p += b"}X\x01\x00\x00\x00w"
    p += b"ctorch._utils\n_rebuild_tensor_v2\n"
    p += b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu"
    p += b"\x8a\x08" + struct.pack("<q", numel) + b"tQ"
    p += b"K\x00" + b"\x8a\x08" + struct.pack("<q", numel) + b"\x85" + b"K\x01\x85" + b"\x89"
    p += b"ccollections\nOrderedDict\n)R" + b"tR" + b"s."
    return bytes(p)


for name, numel in [("numel_2e62_zip.pth", 1 << 62), ("numel_1tb_zip.pth", 1 << 38)]:
    with zipfile.ZipFile(f"{out}/{name}", "w") as z:
        z.writestr("archive/data.pkl", storage_pickle(numel))
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", b"\x00" * 16)

buf = io.BytesIO()
torch.save(obj, buf)
with zipfile.ZipFile(buf) as src, zipfile.ZipFile(
    f"{out}/deflate_4gb_zip.pth", "w", compression=zipfile.ZIP_DEFLATED
) as dst:
    for info in src.infolist():
        dst.writestr(info.filename, src.read(info.filename))
data = bytearray(open(f"{out}/deflate_4gb_zip.pth", "rb").read())
# Patch data.pkl's uncompressed size in its local header (offset 22) and central
# directory entry (offset 24).
for sig, off in [(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)]:
    at = 0
    while True:
        at = data.find(sig, at)
        if at < 0:
            break
        name_at = at + (30 if sig == b"PK\x03\x04" else 46)
        if data[name_at : name_at + 16] == b"archive/data.pkl":
            data[at + off : at + off + 4] = b"\xff\xff\xff\xff"
        at += 4
open(f"{out}/deflate_4gb_zip.pth", "wb").write(bytes(data))
