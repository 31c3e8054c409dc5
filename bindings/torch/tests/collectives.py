"""Every c10d collective on one backend: the rank program of test_backend.py.

run(rank, world, backend, init, out) joins the group, runs each case and saves
{case name: result tensor} to `out`; test_backend.py runs it with "gloo" and
"plait" and compares the two (or, for what Gloo lacks, a reference computed
from the same inputs). Inputs depend only on (case, rank), so every backend
sees the same ones.
"""
import zlib

import torch
import torch.distributed as dist

# Element types of both backends' reductions (Gloo: no float8, no uint32/64).
REDUCE_TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
                torch.int64]
# Data movement is bytes in Plait: every type torch has.
MOVE_TYPES = REDUCE_TYPES + [torch.bool, torch.int16, torch.complex64]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def values(case, rank, n, dtype):
    """Small values, exact in every type: products of 4 ranks stay in int8's range."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{rank}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.randn(n, generator=g), torch.randn(n, generator=g)).to(dtype)
    if dtype.is_floating_point:
        return (torch.randint(-3, 4, (n,), generator=g).to(torch.float32) / 2).to(dtype)
    lo = 0 if dtype == torch.uint8 else -2
    return torch.randint(lo, 3, (n,), generator=g).to(dtype)


BACKEND = None


def mv(t):
    """What a data-movement case hands the backend: Gloo lacks some types
    (bool, int16, complex), so on Gloo those move as their bytes (a view: the
    result lands in t), which is exactly the result Plait must give."""
    if BACKEND == "gloo" and t.dtype not in REDUCE_TYPES:
        return t.view(torch.uint8)
    return t


def name(dtype):
    return str(dtype).replace("torch.", "")


def run_cases(rank, world, results):
    n = 1000
    for dtype in REDUCE_TYPES:
        for opname, op in OPS.items():
            case = f"all_reduce/{opname}/{name(dtype)}"
            t = values(case, rank, n, dtype)
            dist.all_reduce(t, op=op)
            results[case] = t
    for dtype in (torch.int32, torch.bool, torch.uint8):
        for opname, op in (("band", dist.ReduceOp.BAND), ("bor", dist.ReduceOp.BOR), ("bxor", dist.ReduceOp.BXOR)):
            case = f"all_reduce/{opname}/{name(dtype)}"
            t = values(case, rank, n, dtype)
            dist.all_reduce(t, op=op)
            results[case] = t
    # Not contiguous: a transposed matrix, reduced in place.
    m = values("noncontig", rank, 64 * 48, torch.float32).view(64, 48).t()
    dist.all_reduce(m)
    results["all_reduce/noncontiguous"] = m.clone()
    # Sizes from 0 elements up.
    for count in (0, 1, 7, 4096 + 3, 1 << 18):
        case = f"all_reduce/size{count}"
        t = values(case, rank, count, torch.float32)
        dist.all_reduce(t)
        results[case] = t
    for dtype in MOVE_TYPES:
        case = f"broadcast/{name(dtype)}"
        t = values(case, rank, n, dtype)
        dist.broadcast(mv(t), src=world - 1)
        results[case] = t
    for dtype in (torch.float32, torch.int64):
        case = f"reduce/{name(dtype)}"
        t = values(case, rank, n, dtype)
        dist.reduce(t, dst=1 % world)
        if rank == 1 % world:
            results[case] = t
    for dtype in MOVE_TYPES:
        case = f"all_gather/{name(dtype)}"
        t = values(case, rank, 33, dtype)
        out = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather([mv(o) for o in out], mv(t))
        results[case] = torch.stack(out)
        case = f"all_gather_into_tensor/{name(dtype)}"
        out = torch.empty(world * 33, dtype=dtype)
        dist.all_gather_into_tensor(mv(out), mv(values(case, rank, 33, dtype)))
        results[case] = out
    # Outputs that are not contiguous: columns of a matrix.
    cols = torch.zeros(5, world)
    dist.all_gather([cols[:, j] for j in range(world)], values("ag_cols", rank, 5, torch.float32))
    results["all_gather/noncontiguous"] = cols
    for dtype in (torch.float32, torch.int32, torch.bfloat16):
        case = f"reduce_scatter/{name(dtype)}"
        ins = [values(case + str(j), rank, 17, dtype) for j in range(world)]
        out = torch.empty(17, dtype=dtype)
        dist.reduce_scatter(out, ins)
        results[case] = out
        case = f"reduce_scatter_tensor/{name(dtype)}"
        out = torch.empty(17, dtype=dtype)
        dist.reduce_scatter_tensor(out, values(case, rank, 17 * world, dtype))
        results[case] = out
    for dtype in (torch.float32, torch.int16):
        case = f"all_to_all_single/{name(dtype)}"
        out = torch.empty(world * 9, dtype=dtype)
        dist.all_to_all_single(mv(out), mv(values(case, rank, world * 9, dtype)))
        results[case] = out
    # Uneven splits: rank r sends (r + j + 1) rows of 3 to rank j.
    send_splits = [rank + j + 1 for j in range(world)]
    recv_splits = [j + rank + 1 for j in range(world)]
    inp = values("a2a_uneven", rank, sum(send_splits) * 3, torch.float64).view(-1, 3)
    out = torch.empty(sum(recv_splits), 3, dtype=torch.float64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    results["all_to_all_single/uneven"] = out
    ins = [values(f"a2a_list{j}", rank, 5, torch.int64) for j in range(world)]  # Gloo: equal sizes only
    outs = [torch.empty(5, dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, ins)
    results["all_to_all/list"] = torch.cat(outs)
    root = world - 1
    t = values("gather", rank, 11, torch.float32)
    gl = [torch.empty(11) for _ in range(world)] if rank == root else None
    dist.gather(t, gl, dst=root)
    if rank == root:
        results["gather"] = torch.stack(gl)
    sl = [values(f"scatter{j}", 0, 13, torch.int32) for j in range(world)] if rank == 0 else None
    out = torch.empty(13, dtype=torch.int32)
    dist.scatter(out, sl, src=0)
    results["scatter"] = out
    # Ring of send/recv, even ranks send first (blocking calls).
    right, left = (rank + 1) % world, (rank - 1) % world
    msg = values("p2p", rank, 1 << 16, torch.float32)
    got = torch.empty_like(msg)
    if rank % 2 == 0:
        dist.send(msg, right)
        dist.recv(got, left)
    else:
        dist.recv(got, left)
        dist.send(msg, right)
    results["send_recv/ring"] = got
    # batch_isend_irecv: both directions at once (grouped: no order to agree on).
    to_right, from_left = values("batch", rank, 1 << 15, torch.float32), torch.empty(1 << 15)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, to_right, right), dist.P2POp(dist.irecv, from_left, left)])
    for w in works:
        w.wait()
    results["batch_isend_irecv"] = from_left
    # Coalesced all-reduces (one Plait group) and reduce-scatters.
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [values(f"coalesced{i}", rank, 100 + i, torch.float32) for i in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        results[f"coalesced/all_reduce{i}"] = t
    # Object collectives (pickles moved as uint8 tensors).
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "name": "r" * (rank + 1)})
    results["all_gather_object"] = torch.tensor([len(o["name"]) * 10 + o["rank"] for o in objs])
    lst = [("from", rank, list(range(rank + 3)))]
    dist.broadcast_object_list(lst, src=world - 1)
    results["broadcast_object_list"] = torch.tensor(lst[0][2])
    dist.barrier()


def run_async(rank, world, results):
    """async_op=True: Work objects, futures, several in flight."""
    ts = [values(f"async{i}", rank, 1 << 14, torch.float32) for i in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future().then(lambda f: f.value()[0] * 2) for w in works]
    for i, (w, f) in enumerate(zip(works, futs)):
        w.wait()
        assert w.is_completed()
        results[f"async/{i}"] = ts[i]
        results[f"async_future/{i}"] = f.wait()


# What Gloo lacks, checked against a reference (test_backend.py): AVG,
# PREMUL_SUM, NCCL's unsigned and float8 types, complex sums.
PLAIT_ONLY = [("avg", torch.float32), ("avg", torch.int32), ("avg", torch.bfloat16), ("premul", torch.float32),
              ("premul", torch.float64), ("sum", torch.uint32), ("max", torch.uint64), ("max", torch.float8_e4m3fn),
              ("sum", torch.complex64)]


def run_plait_only(rank, world, results):
    for opname, dtype in PLAIT_ONLY:
        case = f"plait_only/{opname}/{name(dtype)}"
        t = values(case, rank, 257, dtype if dtype not in (torch.uint32, torch.uint64, torch.float8_e4m3fn)
                   else torch.int32).to(dtype) if dtype != torch.complex64 else values(case, rank, 257, dtype)
        if opname == "avg":
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
        elif opname == "premul":
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.25))
        else:
            dist.all_reduce(t, op=OPS[opname])
        results[case] = t
    # PREMUL_SUM inside a coalesced group: each operator must live until the
    # group's ncclGroupEnd ran the calls.
    from torch.distributed.distributed_c10d import _coalescing_manager
    cases = [f"plait_only/premul/float64#coalesced{i}" for i in range(3)]
    ts = [values(case, rank, 257, torch.float64) for case in cases]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.25))
    cm.wait()
    results.update(zip(cases, ts))
    # A bad argument inside a coalesced group: an error naming the call, and the
    # group stays usable (its region is closed, nothing of it runs).
    try:
        with _coalescing_manager(async_ops=True) as cm:
            dist.all_gather_into_tensor(torch.empty(3), torch.ones(2))  # needs world * 2 elements
        cm.wait()
        named = False
    except Exception as e:  # noqa: BLE001
        named = "all_gather_into_tensor" in str(e)
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    results["plait_checks/coalesced_bad_size"] = torch.tensor([named, bool((t == world * (world + 1) / 2).all())])


def run_device(rank, world, backend, init, out_prefix):
    """CUDA tensors (one GPU per rank) on plait, CPU tensors on gloo: the same
    cases, results saved on the CPU. Only where torch sees `world` GPUs."""
    if backend == "plait":
        import plait_torch  # noqa: F401
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    results = {}
    n = 4099
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for opname in ("sum", "max"):
            case = f"device/all_reduce/{opname}/{name(dtype)}"
            t = values(case, rank, n, dtype).to(device)
            dist.all_reduce(t, op=OPS[opname])
            results[case] = t.cpu()
    x = values("device/gather", rank, n, torch.float32).to(device)
    out = torch.empty(world * n, device=device)
    dist.all_gather_into_tensor(out, x)
    results["device/all_gather_into_tensor"] = out.cpu()
    big = values("device/rs", rank, world * n, torch.float32).to(device)
    part = torch.empty(n, device=device)
    dist.reduce_scatter_tensor(part, big)
    results["device/reduce_scatter_tensor"] = part.cpu()
    b = values("device/bcast", rank, n, torch.int32).to(device)
    dist.broadcast(b, src=world - 1)
    results["device/broadcast"] = b.cpu()
    rows = [r + 1 for r in range(world)]  # uneven: rank r sends r+1 rows to each peer
    inp = values("device/a2a", rank, rows[rank] * world * 3, torch.float32).view(-1, 3).to(device)
    outp = torch.empty(sum(rows), 3, device=device)
    dist.all_to_all_single(outp, inp, output_split_sizes=rows, input_split_sizes=[rows[rank]] * world)
    results["device/all_to_all_single"] = outp.cpu()
    # Non-contiguous (a transposed view), async with a wait, and a coalesced pair.
    m = values("device/strided", rank, 64 * 33, torch.float32).view(64, 33).to(device).t()
    dist.all_reduce(m, async_op=True).wait()
    results["device/strided"] = m.cpu()
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [values(f"device/coalesced{i}", rank, 1000 + i, torch.float32).to(device) for i in range(2)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    results.update({f"device/coalesced{i}": t.cpu() for i, t in enumerate(ts)})
    if world >= 2:
        msg = values("device/p2p", rank, n, torch.float32).to(device)
        got = torch.empty(n, device=device)
        if rank == 0:
            dist.send(msg, 1)
            dist.recv(got, 1)
        elif rank == 1:
            dist.recv(got, 0)
            dist.send(msg, 0)
        if rank < 2:
            results["device/send_recv"] = got.cpu()
    dist.destroy_process_group()
    torch.save(results, f"{out_prefix}.{rank}")


def run(rank, world, backend, init, out_prefix):
    if backend == "plait":
        import plait_torch  # noqa: F401  (registers the backend)
    global BACKEND
    BACKEND = backend
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    results = {}
    run_cases(rank, world, results)
    run_async(rank, world, results)
    if backend == "plait":
        run_plait_only(rank, world, results)
    dist.destroy_process_group()
    torch.save(results, f"{out_prefix}.{rank}")
