# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop on checkpoints unlike the fixtures: every kind of state PyTorch users save that is not a plain Adam/FSDP
state dict. `make` writes them with real PyTorch (and the reference each gather must equal); optscope-cli gathers
each (unusual_interop.sh); `compare` loads every gather output with weights_only=True and checks it against the
reference: same keys in the same order, bit-identical tensors of the same dtype and shape, equal plain values.

    torch-python unusual_interop.py make OUTDIR
    torch-python unusual_interop.py compare OUTDIR
    torch-python unusual_interop.py compare_reshaped OUTDIR DIFF_JSON   (diff of the 2-D DCP and reshaped.pt)

Cases: broadcast views too large to expand (kept views), LBFGS state (lists of tensors), empty dicts (an optimizer's "state" before its first step, Lightning's loops), Adam amsgrad+fused saved with pickle protocol 2, views sharing one storage
(transposed, strided, offset), tensors inside namedtuples and objects, complex64/complex32/uint16/bool/uint8 0-dim/empty tensors next to bytes, tuple and set values,
dict keys of torch.device, dtype, tuple, int and str, a
legacy-format (pre-1.6 serialisation) state dict, a single-process DCP with nested lists, strings, None and the
RNG state, and a 4-rank DCP mixing FSDP2 state with 2-D DTensors ([Shard(0), Shard(1)] and [Replicate(), Shard(1)]
on a 2x2 mesh).
"""
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from make_fixtures import spawn  # noqa: E402


# classes whose instances hold tensors, which DCP pickles whole into one item (compare_nested); loading them back
# finds them here, as __main__'s
Point = __import__("collections").namedtuple("Point", ["x", "y"])


class Holder:
    def __init__(self, w, step):
        self.w, self.step = w, step


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def make_plain(out):
    names = []
    m = small_model()
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))

    opt = torch.optim.LBFGS(m.parameters(), history_size=3)

    def closure():
        opt.zero_grad()
        loss = m(x).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)
    torch.save({"optim": opt.state_dict()}, f"{out}/lbfgs.pt")
    names.append("lbfgs.pt")
    # the same optimizer alone (integer ids) beside its model, for `fix` to name: its lists of tensors are values
    # holding tensors, which the fixed file must carry as saved (compare_lbfgs_fix)
    torch.save(opt.state_dict(), f"{out}/lbfgs_optim.pt")
    torch.save(m.state_dict(), f"{out}/lbfgs_model.pt")

    opt2 = torch.optim.Adam(m.parameters(), amsgrad=True, foreach=False, fused=True)
    m(x).sum().backward()
    opt2.step()
    torch.save(opt2.state_dict(), f"{out}/adam_amsgrad_fused_proto2.pt", pickle_protocol=2)
    names.append("adam_amsgrad_fused_proto2.pt")

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    torch.save({"a": base, "t": base.t(), "v": base[1:3, 2:5], "s": base[::2], "e": base.expand(2, 4, 6)},
               f"{out}/views.pt")
    names.append("views.pt")

    torch.save({"c": torch.randn(3, dtype=torch.complex64), "ch": torch.tensor([1 + 2j, 3 - 1j], dtype=torch.chalf),
                "u16": torch.tensor([1, 2, 65535], dtype=torch.uint16), "b": torch.tensor(True), "e": torch.empty(0, 5),
                "u": torch.tensor(7, dtype=torch.uint8), "bytes": b"\x00\x01", "tuple": (1, 2.5, "x"),
                "cplx": 1.5 - 2j, "ba": bytearray(b"a\xffb"),
                "set": {1, 2}, "inf": math.inf,
                # torch.load keeps requires_grad of a plain tensor as of a Parameter (gather dropped the plain one's)
                "rg": torch.randn(3, requires_grad=True), "frozen_param": nn.Parameter(torch.ones(2), requires_grad=False),
                "param": nn.Parameter(torch.zeros(2)),
                # dict keys of every type a weights-only load gives back (a torch.device key became a str)
                "keys": {torch.device("cpu"): 1, torch.device("cuda", 1): 2, torch.float16: 3, (1, "a"): 4, 5: 6,
                         "s": 7}}, f"{out}/misc.pt")
    names.append("misc.pt")

    # views too large to expand (4 EiB and 512 MiB): torch.save keeps them views, and so must gather
    torch.save({"zeros": torch.zeros(1).expand(2**30, 2**30),
                "rows": torch.tensor([[1.5, -2.0, 3.0, -0.0]]).expand(2**25, 4),
                "small": torch.arange(4.0).expand(3, 4)}, f"{out}/broadcast_views.pt")
    names.append("broadcast_views.pt")

    torch.save(m.state_dict(), f"{out}/legacy_state_dict.pt", _use_new_zipfile_serialization=False)
    names.append("legacy_state_dict.pt")

    # empty dicts are data: an optimizer before its first step and SGD without momentum save "state": {} (a gather
    # without it raises KeyError: 'state' in load_state_dict); Lightning keeps empty loop states
    fresh = torch.optim.Adam(m.parameters())
    plain_sgd = torch.optim.SGD(m.parameters(), lr=0.1)
    m(x).sum().backward()
    plain_sgd.step()
    torch.save({"state_dict": m.state_dict(), "optimizer_states": [fresh.state_dict(), plain_sgd.state_dict()],
                "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 2}}},
                          "validate_loop": {}}, "callbacks": {}}, f"{out}/empty_dicts.ckpt")
    names.append("empty_dicts.ckpt")

    sd = {"model": m.state_dict(), "optim": opt2.state_dict(),
          "extra": {"epoch": 3, "lst": [torch.ones(2), {"q": torch.zeros(3, dtype=torch.int64)}], "name": "run-7",
                    "f": 1.5, "none": None},
          "rng": torch.get_rng_state()}
    dcp.save(sd, checkpoint_id=f"{out}/dcp_single_process")  # no process group: DCP saves as one rank
    names.append("dcp_single_process")

    # tensors inside what DCP saves as one item: it never descends a tuple, nor a list of tuples; a reshard must write
    # each such value as one item, tensors inside (compare_tuples), not a key per element that its loader never asks for
    tuples = {"model": m.state_dict(), "tup": (torch.ones(2), 5), "lot": [(torch.arange(3), "a")],
              "mixed": [torch.zeros(2), (torch.full((2,), 7.0), {"k": torch.ones(1)})],
              "tdict": ({"w": torch.eye(2)}, None), "betas": (0.9, 0.99),
              # torch's own plain types: a weights-only load gives them back as they were, and so must we
              "dev": torch.device("cuda", 1), "cpu": torch.device("cpu"), "size": torch.Size([2, 3])}
    dcp.save(tuples, checkpoint_id=f"{out}/dcp_tuples")
    names.append("dcp_tuples")
    torch.save(tuples, f"{out}/tuples.pt")
    names.append("tuples.pt")

    # SparseAdam keeps its step a Python int (every other class a tensor since 1.12): a reshard must keep it one, or
    # dcp.load into the live optimizer's state dict raises 'expected BytesStorageMetadata' (compare_sparse_adam)
    emb = nn.Embedding(10, 4, sparse=True)
    sparse_opt = torch.optim.SparseAdam(emb.parameters(), lr=0.01)
    for _ in range(3):
        sparse_opt.zero_grad()
        emb(torch.tensor([1, 3, 5])).sum().backward()
        sparse_opt.step()
    assert isinstance(sparse_opt.state_dict()["state"][0]["step"], int)
    torch.save({"model": emb.state_dict(), "optim": sparse_opt.state_dict()}, f"{out}/sparse_adam.pt")
    names.append("sparse_adam.pt")

    # torch.device / torch.Size calls of arguments torch does not take (as a hostile file has them, made here by
    # __reduce__), beside well-formed ones: gather keeps the good ones as they are and leaves the others out, never
    # writing what torch.load then refuses (compare_torch_types)
    class Call:
        def __init__(self, fn, args):
            self.fn, self.args = fn, args

        def __reduce__(self):
            return (self.fn, self.args)

    D, S = torch.device, torch.Size
    torch.save({"w": torch.ones(2), "good_dev": D("cuda", 3), "good_meta": D("meta"), "good_size": S([4, -1]),
                "bad_colon": Call(D, ("a:b",)), "bad_index": Call(D, ("cuda", -1)), "bad_wrap": Call(D, ("cuda", 128)),
                "bad_both": Call(D, ("cuda:1", 2)), "bad_type": Call(D, ("npu", 0)), "bad_str": Call(S, (["a"],)),
                "bad_big": Call(S, ([2**70],)), "bad_nested": Call(S, ([[1]],)), "bad_int": Call(S, (5,))},
               f"{out}/torch_types_hostile.pt")

    # tensors inside objects that dcp.save pickles whole, tensors and all (a namedtuple's fields, a plain object's
    # attribute, a list of namedtuples), two views over one storage among them: a reshard writes each as that one
    # item, its tensors inside and sharing their storage as torch.save keeps them (compare_nested)
    base = torch.arange(12, dtype=torch.float32)
    nested = {"model": m.state_dict(), "point": Point(base, base[4:].view(2, 4)),
              "holder": Holder(torch.ones(3, dtype=torch.bfloat16), step=7), "points": [Point(torch.zeros(2), 1)],
              "t": base[:2]}
    dcp.save(nested, checkpoint_id=f"{out}/dcp_nested")
    torch.save(nested, f"{out}/nested.pt")

    # values shared through the pickle memo (compare_shared): a list of strings under three keys; a list of 100 dicts
    # shared 150 times 48 dicts deep, past the budget for expanding repeats (the later ones stay whole, one of them
    # cut in the middle); a tensor 250 dicts deep, past how deep a state dict is descended (200). A reshard writes a
    # shared value once, every key's item pointing at it, and reads back the same keys
    words = ["x", "y"]
    q = [{"a": i} for i in range(100)]
    deep = {"y": [q] * 150}
    for _ in range(48):
        deep = {"d": deep}
    nest = {"w": torch.arange(3.0)}
    for _ in range(250):
        nest = {"n": nest}
    torch.save({"w": torch.ones(2), "a": words, "b": words, "g": {"x": words}, "deep": deep, "nest": nest},
               f"{out}/shared.pt")

    # sparse tensors of every layout a weights-only load rebuilds (torch._utils._rebuild_sparse_tensor over their
    # indices and values, the layout by torch.serialization._get_layout), one inside a list; quantized tensors
    # (_rebuild_qtensor over their storage: per tensor, per channel with tensors of scales and zero points, a view)
    # (compare_sparse)
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 2, 1], [1, 0, 2]]), torch.tensor([1.5, -2.0, 3.25]), (3, 4))
    x = torch.linspace(-3, 3, 24).view(4, 6)
    per_channel = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=torch.float64),
                                             torch.tensor([0, 1, -2, 3]), 0, torch.qint8)
    torch.save({"w": torch.ones(2), "coo": coo, "coalesced": coo.coalesce(), "csr": torch.eye(3).to_sparse_csr(),
                "csc": (torch.arange(12.0).view(3, 4) % 3).to_sparse_csc(),
                "bsr": torch.eye(4, dtype=torch.float64).to_sparse_bsr((2, 2)), "in_list": [coo.double()],
                "q_u8": torch.quantize_per_tensor(x, 0.05, 60, torch.quint8), "q_channel": per_channel,
                "q_i32": torch.quantize_per_tensor(x, 0.001, -7, torch.qint32),
                "q_view": torch.quantize_per_tensor(x, 0.1, 3, torch.qint8)[1:3, ::2]},
               f"{out}/sparse.pt")

    # objects a weights-only load refuses, as torchtitan's TrainState saves its losses (an io.BytesIO of a torch.save)
    # and Megatron-LM its args: gather leaves them out; reshard writes them back (compare_objects)
    import argparse
    import io
    losses = io.BytesIO()
    torch.save([1.5, 1.25], losses)
    dcp.save({"model": m.state_dict(), "train_state": {"step": 3, "global_avg_losses": losses},
              "args": argparse.Namespace(lr=0.5, name="run-7"), "fz": frozenset({"a"})},
             checkpoint_id=f"{out}/dcp_objects")

    # a torch.save file zipped again by another tool (torch.load reads deflated records): every record deflated, and
    # one with the tensors' records deflated and the rest stored (zip skips compressing what does not shrink); a 3 MB
    # tensor (many pieces of inflate), an empty one, shared views. Each is read, gathered and compared as the others,
    # and is EQUAL to the file before it was zipped again (unusual_interop.sh)
    import zipfile
    big = torch.arange(3 * 2**18, dtype=torch.float32).view(-1, 1024)
    torch.save({"model": m.state_dict(), "big": big, "row": big[7], "empty": torch.zeros(0, 3), "step": 5},
               f"{out}/to_deflate.pt")
    for name, deflate in (("deflated.pt", lambda n: True), ("deflated_mixed.pt", lambda n: "/data/" in n)):
        with zipfile.ZipFile(f"{out}/to_deflate.pt") as zin, zipfile.ZipFile(f"{out}/{name}", "w") as zout:
            for info in zin.infolist():
                zout.writestr(info.filename, zin.read(info.filename),
                              compress_type=zipfile.ZIP_DEFLATED if deflate(info.filename) else zipfile.ZIP_STORED)
        with zipfile.ZipFile(f"{out}/{name}") as z:
            assert any(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist()), name
        loaded = torch.load(f"{out}/{name}", weights_only=True)  # torch reads it as the file it was zipped from
        assert torch.equal(loaded["big"], big) and loaded["step"] == 5, name
        names.append(name)
    return names


def _mesh_worker(rank, world, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    m = small_model()
    fully_shard(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(2)
    for _ in range(2):  # FSDP2 cannot run backward on CPU in 2.6: gradients by hand, with the parameters' layout
        for p in m.parameters():
            p.grad = distribute_tensor(torch.randn(p.shape, generator=g), p.device_mesh, p.placements)
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(m, opt)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"))
    full = torch.arange(9 * 11, dtype=torch.float32).reshape(9, 11)
    sd = {"model": msd, "optim": osd, "tp_2d": distribute_tensor(full, mesh, [Shard(0), Shard(1)]),
          "replicated_cols": distribute_tensor(full[:5].clone(), mesh, [Replicate(), Shard(1)])}
    dcp.save(sd, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def make(out):
    os.makedirs(out, exist_ok=True)
    names = make_plain(out)
    spawn(_mesh_worker, 4, f"{out}/dcp_2d_mesh_4ranks")
    names.append("dcp_2d_mesh_4ranks")
    # the 2-D DTensors again, of other shapes with the same elements in row-major order (one changed), for diff
    full = torch.arange(9 * 11, dtype=torch.float32)
    changed = full.clone()
    changed[50] = -1.0
    torch.save({"tp_2d": changed, "replicated_cols": full[:55].reshape(11, 5).clone()}, f"{out}/reshaped.pt")
    # a broadcast view too large to expand (320 MiB over 20 bytes) and the same values stored dense: diff reads the
    # view expanded against the dense file in blocks, whose mapped pages it gives back as it goes
    wide = torch.arange(5, dtype=torch.float32).view(5, 1).expand(5, 2**24)
    torch.save({"w": wide}, f"{out}/wide_view.pt")
    torch.save({"w": wide.clone()}, f"{out}/wide_dense.pt")
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    for n in names:
        if os.path.isdir(f"{out}/{n}"):
            dcp_to_torch_save(f"{out}/{n}", f"{out}/{n}.ref.pt")
    json.dump(names, open(f"{out}/names.json", "w"))
    print(f"made {len(names)} checkpoints in {out}")


def equal(a, b, path):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{path}: tensor vs {type(b).__name__}"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        assert type(a) is type(b) and a.requires_grad == b.requires_grad, \
            f"{path}: {type(a).__name__}(requires_grad={a.requires_grad}) vs {type(b).__name__}(requires_grad={b.requires_grad})"
        if a.numel() > 2**20 and 0 in a.stride():  # a view too large to expand: a view of the same strides over equal stored elements
            assert a.stride() == b.stride(), f"{path}: strides {a.stride()} vs {b.stride()}"
            stored = tuple(slice(0, 1) if s == 0 else slice(None) for s in a.stride())
            a, b = (t[stored].clone(memory_format=torch.contiguous_format) for t in (a, b))
        if a.numel():  # compare the bytes, so that NaNs and -0.0 count too
            assert torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                               b.reshape(-1).contiguous().view(torch.uint8)), f"{path}: bytes differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict), f"{path}: dict vs {type(b).__name__}"
        assert list(a.keys()) == list(b.keys()), f"{path}: keys {list(a.keys())} vs {list(b.keys())}"
        for k in a:
            equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {type(a).__name__}/{len(a)} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            equal(x, y, f"{path}.{i}")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def compare(out):
    names = json.load(open(f"{out}/names.json"))
    for n in names:
        src = f"{out}/{n}"
        ref = torch.load(f"{src}.ref.pt" if os.path.isdir(src) else src, weights_only=True)
        got = torch.load(f"{src}.optscope.pt", weights_only=True)
        equal(ref, got, n)
        print(f"{n}: equal")
    print(f"all {len(names)} gather outputs equal PyTorch's own view")


def compare_reshaped(out, report):
    """optscope's diff of the 2-D DCP against reshaped.pt counts the elements that differ in row-major order, as
    torch.equal of the two flattened would: a Shard(1) layout is no row-major run, and must not be read as one"""
    ref = torch.load(f"{out}/dcp_2d_mesh_4ranks.ref.pt", weights_only=True)
    other = torch.load(f"{out}/reshaped.pt", weights_only=True)
    got = {e["key"]: e for e in json.load(open(report))["entries"]}
    for key in ("tp_2d", "replicated_cols"):
        want = int((ref[key].reshape(-1) != other[key].reshape(-1)).sum())
        e = got[key]
        assert e["values_compared"] and e["num_diff"] == want, f"{key}: optscope {e}, PyTorch {want} differ"
        print(f"{key}: {want} of {ref[key].numel()} differ in row-major order, as PyTorch counts")


def compare_objects(out):
    """the reshard of dcp_objects (dcp_objects.rs2) loads in PyTorch with its objects as they were saved"""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    for name in ("dcp_objects", "dcp_objects.rs2"):
        dcp_to_torch_save(f"{out}/{name}", f"{out}/{name}.pt")
    ref = torch.load(f"{out}/dcp_objects.pt", weights_only=False)
    got = torch.load(f"{out}/dcp_objects.rs2.pt", weights_only=False)
    assert vars(got["args"]) == vars(ref["args"]) == {"lr": 0.5, "name": "run-7"}, got["args"]
    assert type(got["fz"]) is frozenset and got["fz"] == ref["fz"] == frozenset({"a"}), got["fz"]
    assert got["train_state"]["global_avg_losses"].getvalue() == ref["train_state"]["global_avg_losses"].getvalue()
    got["train_state"]["global_avg_losses"].seek(0)
    assert torch.load(got["train_state"]["global_avg_losses"], weights_only=False) == [1.5, 1.25]
    equal(ref["model"], got["model"], "dcp_objects.model")
    print("dcp_objects: resharded, its Namespace, BytesIO and frozenset load as saved")


def compare_tuples(out, *resharded):
    """each reshard of dcp_tuples / tuples.pt has the items dcp.save made of the same state dict (a tuple holding a
    tensor is one BYTE_IO item), and dcp.load into a target of that structure gives the values saved"""
    from torch.distributed.checkpoint import FileSystemReader

    def items(path):
        md = FileSystemReader(path).read_metadata()
        return {k: type(v).__name__ for k, v in md.state_dict_metadata.items()}

    def target(o):  # tensors zeroed; a tuple is one item that the load puts back whole
        if isinstance(o, torch.Tensor):
            return torch.zeros_like(o)
        if isinstance(o, dict):
            return {k: target(v) for k, v in o.items()}
        if isinstance(o, list):
            return [target(v) for v in o]
        return None if isinstance(o, tuple) else o

    ref = torch.load(f"{out}/dcp_tuples.ref.pt", weights_only=True)
    want = items(f"{out}/dcp_tuples")
    for path in resharded:
        got = items(path)
        assert got == want, f"{path}: items {got}, dcp.save made {want}"
        loaded = target(ref)
        dcp.load(loaded, checkpoint_id=path)
        equal(ref, loaded, path)
        print(f"{path}: the items dcp.save makes, and dcp.load gives the tuples back with their tensors")


def compare_sparse_adam(out, resharded):
    """the reshard of sparse_adam.pt has the items dcp.save makes of the same dict (SparseAdam's step a bytes item,
    an int), and dcp.load into a state dict of the saved structure gives what it gives from dcp.save's folder"""
    from torch.distributed.checkpoint import FileSystemReader

    ref = torch.load(f"{out}/sparse_adam.pt", weights_only=True)
    theirs = f"{out}/sparse_adam.torch_dcp"
    dcp.save(ref, checkpoint_id=theirs)

    def items(path):
        md = FileSystemReader(path).read_metadata()
        return {k: type(v).__name__ for k, v in md.state_dict_metadata.items()}

    def loaded(path):
        target = {"model": {k: torch.zeros_like(v) for k, v in ref["model"].items()},
                  "optim": {"state": {0: {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0)
                                          for k, v in ref["optim"]["state"][0].items()}},
                            "param_groups": ref["optim"]["param_groups"]}}
        dcp.load(target, checkpoint_id=path)
        return target

    assert items(resharded) == items(theirs), f"{resharded}: items {items(resharded)}, dcp.save made {items(theirs)}"
    got = loaded(resharded)
    # (DCP puts what it loads of an int-keyed dict under the str key its metadata names, beside the target's int key)
    steps = [v["step"] for v in got["optim"]["state"].values()]
    assert ref["optim"]["state"][0]["step"] in steps and all(type(s) is int for s in steps), steps
    equal(loaded(theirs), got, resharded)
    print(f"{resharded}: SparseAdam's int step stays an int item, and dcp.load gives what dcp.save's folder gives")


def compare_nested(out, *resharded):
    """each reshard of dcp_nested / nested.pt has the items dcp.save made, and loads (weights_only=False, as DCP's
    loader unpickles a value item) with the namedtuples' and the object's tensors as saved, the two views of one
    storage still over one storage"""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    def items(path):
        md = FileSystemReader(path).read_metadata()
        return {k: type(v).__name__ for k, v in md.state_dict_metadata.items()}

    want = items(f"{out}/dcp_nested")
    ref = torch.load(f"{out}/nested.pt", weights_only=False)
    for path in resharded:
        assert items(path) == want, f"{path}: items {items(path)}, dcp.save made {want}"
        dcp_to_torch_save(path, f"{path}.pt")
        got = torch.load(f"{path}.pt", weights_only=False)
        equal(ref["model"], got["model"], f"{path}.model")
        equal(ref["t"], got["t"], f"{path}.t")
        p = got["point"]
        assert type(p) is Point, type(p)
        equal(ref["point"].x, p.x, f"{path}.point.x")
        equal(ref["point"].y, p.y, f"{path}.point.y")
        assert p.y.untyped_storage().data_ptr() == p.x.untyped_storage().data_ptr() and p.y.storage_offset() == 4, \
            f"{path}: point.y is no longer a view of point.x's storage"
        assert type(got["holder"]) is Holder and got["holder"].step == 7, vars(got["holder"])
        equal(ref["holder"].w, got["holder"].w, f"{path}.holder.w")
        assert type(got["points"]) is list and type(got["points"][0]) is Point and got["points"][0].y == 1
        equal(ref["points"][0].x, got["points"][0].x, f"{path}.points.0.x")
        print(f"{path}: the items dcp.save makes, tensors inside objects as saved, views sharing their storage")


def compare_shared(out, resharded):
    """the reshard of shared.pt loads as torch.load reads the source, and writes each shared value once: the
    items of the keys that share it point at the same bytes"""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(resharded, f"{resharded}.pt")
    equal(torch.load(f"{out}/shared.pt", weights_only=True), torch.load(f"{resharded}.pt", weights_only=False),
          resharded)
    where = {}
    for index, info in FileSystemReader(resharded).read_metadata().storage_data.items():
        where.setdefault((info.relative_path, info.offset, info.length), []).append(index.fqn)
    shared = sorted(sorted(keys) for keys in where.values() if len(keys) > 1)
    assert ["a", "b", "g.x"] in shared, [keys[:3] for keys in shared]
    # the lists kept whole past the budget: "deep.d...d.y.N", all at the bytes of one
    whole = "deep." + "d." * 48 + "y."
    kept = [keys for keys in shared if all(k.startswith(whole) and k[len(whole):].isdigit() for k in keys)]
    assert len(kept) == 1 and len(kept[0]) > 10, [(keys[0], len(keys)) for keys in shared]
    print(f"{resharded}: loads as the source; {len(shared)} shared values written once, the whole lists under "
          f"{len(kept[0])} keys")


def _same_sparse(a, b, path):
    if isinstance(a, list):
        assert type(b) is list and len(a) == len(b), f"{path}: {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same_sparse(x, y, f"{path}.{i}")
        return
    assert a.layout == b.layout and a.dtype == b.dtype and a.shape == b.shape, \
        f"{path}: {a.layout} {a.dtype} {list(a.shape)} vs {b.layout} {b.dtype} {list(b.shape)}"
    if a.is_quantized:
        assert b.is_quantized and a.qscheme() == b.qscheme() and a.stride() == b.stride(), path
        assert a.storage_offset() == b.storage_offset(), path
        if a.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            assert a.q_scale() == b.q_scale() and a.q_zero_point() == b.q_zero_point(), path
        else:
            assert torch.equal(a.q_per_channel_scales(), b.q_per_channel_scales()), path
            assert torch.equal(a.q_per_channel_zero_points(), b.q_per_channel_zero_points()), path
            assert a.q_per_channel_axis() == b.q_per_channel_axis(), path
        assert torch.equal(a.int_repr(), b.int_repr()), f"{path}: values differ"
    elif a.layout == torch.strided:
        assert torch.equal(a, b), path
    elif a.layout == torch.sparse_coo:
        assert a.is_coalesced() == b.is_coalesced(), f"{path}: coalesced {a.is_coalesced()} vs {b.is_coalesced()}"
        assert torch.equal(a._indices(), b._indices()) and torch.equal(a._values(), b._values()), path
    else:
        rows = a.layout in (torch.sparse_csr, torch.sparse_bsr)
        ca, pa = (a.crow_indices(), a.col_indices()) if rows else (a.ccol_indices(), a.row_indices())
        cb, pb = (b.crow_indices(), b.col_indices()) if rows else (b.ccol_indices(), b.row_indices())
        assert torch.equal(ca, cb) and torch.equal(pa, pb) and torch.equal(a.values(), b.values()), path


def compare_sparse(out, gathered, resharded):
    """sparse.pt gathered (loaded weights-only) and resharded (loaded by DCP) holds the same sparse tensors (layout,
    indices and values) and quantized tensors (scheme, scales, zero points, view, integers) as saved"""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ref = torch.load(f"{out}/sparse.pt", weights_only=True)
    dcp_to_torch_save(resharded, f"{resharded}.pt")
    for path, got in ((gathered, torch.load(gathered, weights_only=True)),
                      (resharded, torch.load(f"{resharded}.pt", weights_only=False))):
        assert list(got) == list(ref), f"{path}: {list(got)}"
        for k in ref:
            _same_sparse(ref[k], got[k], f"{path}.{k}")
        print(f"{path}: the sparse tensors of every layout and the quantized tensors as saved")


def compare_lbfgs_fix(out):
    """fix of the integer-keyed LBFGS optimizer against its model: the state is under the parameter's name, the groups
    list the names, and every state value (lists of tensors, tensors, numbers) is as saved, bit for bit"""
    orig = torch.load(f"{out}/lbfgs_optim.pt", weights_only=True)
    fixed = torch.load(f"{out}/lbfgs_optim.fixed.pt", weights_only=True)
    names = list(torch.load(f"{out}/lbfgs_model.pt", weights_only=True))
    assert fixed["param_groups"][0]["params"] == names, fixed["param_groups"][0]["params"]
    assert list(fixed["state"]) == [names[0]], list(fixed["state"])  # LBFGS keeps its state on the first parameter
    equal(orig["state"][0], fixed["state"][names[0]], "state")
    assert any(isinstance(v, list) and v and isinstance(v[0], torch.Tensor) for v in orig["state"][0].values())
    print(f"lbfgs_optim.pt fixed: the state of {names[0]} as saved, its lists of tensors included")


def compare_torch_types(out):
    """the gather of torch_types_hostile.pt loads with weights_only=True: the well-formed device and Size values as
    they were, the calls torch would refuse left out"""
    got = torch.load(f"{out}/torch_types_hostile.pt.optscope.pt", weights_only=True)
    assert list(got) == ["w", "good_dev", "good_meta", "good_size"], list(got)
    assert type(got["good_dev"]) is torch.device and got["good_dev"] == torch.device("cuda", 3), got["good_dev"]
    assert got["good_meta"] == torch.device("meta") and type(got["good_size"]) is torch.Size, got
    assert got["good_size"] == torch.Size([4, -1]), got["good_size"]
    print("torch_types_hostile.pt: good devices and Sizes kept, 9 calls torch refuses left out")


if __name__ == "__main__":
    {"make": make, "compare": compare, "compare_objects": compare_objects, "compare_tuples": compare_tuples,
     "compare_torch_types": compare_torch_types, "compare_sparse_adam": compare_sparse_adam,
     "compare_reshaped": compare_reshaped, "compare_nested": compare_nested,
     "compare_shared": compare_shared, "compare_sparse": compare_sparse,
     "compare_lbfgs_fix": compare_lbfgs_fix}[sys.argv[1]](*sys.argv[2:])
