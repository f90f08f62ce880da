"""The mpi4py process group against gloo, side by side in the same processes, at any world size.

The default group is gloo (on a TCP store rendezvoused over MPI); mpi4py groups are made with
`dist.new_group(backend="mpi4py")`, so every call below runs once on each backend with the same
inputs. Integer results must be identical. Float sums may differ in the last bits because the two
backends add in different orders; float16/bfloat16 differ more, because gloo rounds after every
partial sum while the mpi4py group reduces in float32 and rounds once.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import cast

import pytest
import torch
import torch.distributed as dist

from hpcdist.commcall import Call

pytestmark = pytest.mark.mpi

DTYPES = [
    torch.float32,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"]


@pytest.fixture(scope="module")
def world():
    from mpi4py import MPI

    import hpcdist.mpi_backend as mb

    comm = MPI.COMM_WORLD
    assert not dist.is_initialized()
    store = (
        dist.TCPStore("127.0.0.1", 0, comm.size, True, timedelta(seconds=60), wait_for_workers=False)
        if comm.rank == 0
        else None
    )
    port = comm.bcast(store.port if store else None, root=0)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, comm.size, False, timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=comm.rank, world_size=comm.size, timeout=timedelta(seconds=60))
    mb.register()
    half = list(range(0, comm.size, 2))  # a subgroup: the even ranks
    pairs = [
        (dist.group.WORLD, dist.new_group(backend="mpi4py")),
        (dist.new_group(half), dist.new_group(half, backend="mpi4py")),
    ]
    yield SimpleNamespace(comm=comm, rank=comm.rank, size=comm.size, pairs=pairs, mpi=pairs[0][1])
    dist.destroy_process_group()


def _data(dtype: torch.dtype, shape: tuple, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 + 0.5).to(dtype)
    return torch.randint(1, 4, shape, generator=g).to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    if a.dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(a.float(), b.float(), rtol=3e-2, atol=3e-2, msg=what)  # gloo rounds per step
    elif a.is_floating_point() or a.is_complex():
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=what)  # summation order differs
    else:
        assert torch.equal(a, b), f"{what}: {a} != {b}"


def _both(pair, fn, outputs=None):
    """Run fn(group) on gloo then on mpi4py (fn(group, output) with each group's own output); both succeed or raise."""
    results = []
    for i, group in enumerate(pair):
        try:
            results.append(fn(group) if outputs is None else fn(group, outputs[i]))
        except (RuntimeError, TypeError, ValueError) as exc:
            results.append(exc)
    assert isinstance(results[0], Exception) == isinstance(results[1], Exception), f"gloo vs mpi4py: {results}"
    return results


def _cases(n: int, seed: int):
    rng = random.Random(seed)
    for i in range(n):
        shape = rng.choice([(0,), (1,), (5,), (3, 4), (2, 3, 2)])
        yield i, rng.choice(DTYPES), shape, rng.random() < 0.3


def test_all_reduce_matches_gloo_for_every_dtype_and_op(world) -> None:
    for pair in world.pairs:
        if pair[1] == dist.GroupMember.NON_GROUP_MEMBER:
            continue
        for dtype in DTYPES:
            for op in OPS:
                for transposed in (False, True):
                    base = _data(dtype, (3, 4), 100 + world.rank)
                    tensors = [base.clone().t() if transposed else base.clone() for _ in pair]
                    res = _both(
                        pair,
                        lambda g, t, op=op: dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g),
                        tensors,
                    )
                    what = f"all_reduce {dtype} {op} transposed={transposed}"
                    assert isinstance(res[0], Exception) == isinstance(res[1], Exception), f"{what}: {res}"
                    if not isinstance(res[0], Exception):
                        _same(tensors[1], tensors[0], what)


def test_collectives_match_gloo_over_random_shapes_dtypes_roots_and_groups(world) -> None:
    for pair in world.pairs:
        if pair[1] == dist.GroupMember.NON_GROUP_MEMBER:
            continue
        n, me = dist.get_world_size(pair[1]), dist.get_rank(pair[1])
        ranks = dist.get_process_group_ranks(pair[1])
        for i, dtype, shape, strided in _cases(40, 7):
            root = ranks[i % n]
            x = _data(dtype, shape, 1000 * i + world.rank)
            if strided and x.dim() > 1:
                x = x.transpose(0, 1)
            what = f"case {i}: {dtype} {shape} root {root} group {ranks}"
            # broadcast
            outs = [x.clone() for _ in pair]
            for g, t in zip(pair, outs, strict=True):
                dist.broadcast(t, src=root, group=g)
            _same(outs[1], outs[0], "broadcast " + what)
            # all_gather (list form)
            lists = [[torch.empty_like(x) for _ in range(n)] for _ in pair]
            for g, lst in zip(pair, lists, strict=True):
                dist.all_gather(lst, x, group=g)
            for a, b in zip(lists[1], lists[0], strict=True):
                _same(a, b, "all_gather " + what)
            # all_gather_into_tensor
            flat = [torch.empty((n * x.numel(),), dtype=dtype) for _ in pair]
            for g, f in zip(pair, flat, strict=True):
                dist.all_gather_into_tensor(f, x.reshape(-1), group=g)
            _same(flat[1], flat[0], "all_gather_into_tensor " + what)
            # gather / scatter
            gl = [[torch.empty_like(x) for _ in range(n)] if world.rank == root else None for _ in pair]
            for g, into in zip(pair, gl, strict=True):
                if g is pair[0] and dtype.is_complex:  # gloo's gather has no complex: send the float pairs
                    dist.gather(
                        torch.view_as_real(x), into and [torch.view_as_real(t) for t in into], dst=root, group=g
                    )
                else:
                    dist.gather(x, into, dst=root, group=g)
            if world.rank == root:
                gathered_mpi, gathered_gloo = gl[1], gl[0]
                assert gathered_mpi is not None and gathered_gloo is not None  # lists on the root
                for a, b in zip(gathered_mpi, gathered_gloo, strict=True):
                    _same(a, b, "gather " + what)
            src = [_data(dtype, shape, 7 * i + j) for j in range(n)] if world.rank == root else None
            sc = [torch.empty(shape, dtype=dtype) for _ in pair]
            for g, out in zip(pair, sc, strict=True):
                dist.scatter(out, src, src=root, group=g)
            _same(sc[1], sc[0], "scatter " + what)
            # all_to_all_single with uneven splits, and all_to_all with lists
            splits = [(me + j) % 3 for j in range(n)]
            recv_splits = [(j + me) % 3 for j in range(n)]
            inp = _data(dtype, (sum(splits), 2), 31 * i + world.rank)
            a2a = [torch.empty((sum(recv_splits), 2), dtype=dtype) for _ in pair]
            for g, out in zip(pair, a2a, strict=True):
                dist.all_to_all_single(out, inp, recv_splits, splits, group=g)
            _same(a2a[1], a2a[0], "all_to_all_single " + what)
            ins = [_data(dtype, (2,), 17 * i + j + world.rank) for j in range(n)]  # gloo needs equal sizes
            outl = [[torch.empty((2,), dtype=dtype) for _ in range(n)] for _ in pair]
            for g, received in zip(pair, outl, strict=True):
                dist.all_to_all(received, ins, group=g)
            for a, b in zip(outl[1], outl[0], strict=True):
                _same(a, b, "all_to_all " + what)
            if dtype in (torch.bool,):
                continue  # gloo cannot reduce_scatter/reduce bool with these ops identically; covered above
            # reduce, reduce_scatter (list and tensor forms)
            red = [x.clone() for _ in pair]
            for g, t in zip(pair, red, strict=True):
                dist.reduce(t, dst=root, group=g)
            if world.rank == root:
                _same(red[1], red[0], "reduce " + what)
            chunks = [_data(dtype, shape, 5 * i + j + world.rank) for j in range(n)]
            rs = [torch.empty(shape, dtype=dtype) for _ in pair]
            res = _both(pair, lambda g, out, chunks=chunks: dist.reduce_scatter(out, chunks, group=g), rs)
            if not isinstance(res[0], Exception):
                _same(rs[1], rs[0], "reduce_scatter " + what)
            big = torch.cat([c.reshape(-1) for c in chunks])
            rst = [torch.empty((chunks[0].numel(),), dtype=dtype) for _ in pair]
            res = _both(pair, lambda g, out, big=big: dist.reduce_scatter_tensor(out, big, group=g), rst)
            if not isinstance(res[0], Exception):
                _same(rst[1], rst[0], "reduce_scatter_tensor " + what)


def test_bfloat16_and_float16_sums_are_right(world) -> None:
    """1 + 2^-8 + … cannot be summed in bfloat16 bytes; the group reduces in float32 and rounds once."""
    for dtype in (torch.bfloat16, torch.float16):
        values = torch.tensor([1.0, 2.0**-9, 3.0, 1000.0, 0.01])
        t = (values * (world.rank + 1)).to(dtype)
        dist.all_reduce(t, group=world.mpi)
        exact = cast(torch.Tensor, sum((values * (r + 1)).to(dtype).float() for r in range(world.size)))  # in float32
        assert torch.equal(t, exact.to(dtype)), f"{dtype}: {t} != {exact.to(dtype)}"
        avg = (values * (world.rank + 1)).to(dtype)
        dist.all_reduce(avg, op=dist.ReduceOp.AVG, group=world.mpi)
        assert torch.equal(avg, (exact / world.size).to(dtype))


def test_integer_avg_is_rejected_like_gloo(world) -> None:
    with pytest.raises(TypeError, match=r"ReduceOp\.AVG with dtype torch\.int32"):
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG, group=world.mpi)
    dist.barrier(group=world.mpi)


def test_large_all_reduce_takes_the_ring_and_is_exact(world) -> None:
    t = torch.arange(300_000, dtype=torch.int64) * (world.rank + 1)
    dist.all_reduce(t, group=world.mpi)
    assert torch.equal(t, torch.arange(300_000, dtype=torch.int64) * (world.size * (world.size + 1) // 2))
    m = torch.full((100_001,), float(world.rank))
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=world.mpi)
    assert (m == world.size - 1).all()


def test_ring_segments_uneven_chunks_and_rings_in_flight_together_are_exact(world) -> None:
    import math

    n = 3 * 2**20 // 8 * world.size + 3  # int64: each rank's chunk spans 3-4 one-MiB segments, chunks differ in length
    a = torch.arange(n, dtype=torch.int64) * (world.rank + 1)
    b = torch.full((n,), float(world.rank + 1), dtype=torch.float64)
    first = dist.all_reduce(a, group=world.mpi, async_op=True)
    second = dist.all_reduce(b, op=dist.ReduceOp.PRODUCT, group=world.mpi, async_op=True)
    second.wait()
    first.wait()
    assert torch.equal(a, torch.arange(n, dtype=torch.int64) * (world.size * (world.size + 1) // 2))
    assert torch.equal(b, torch.full((n,), float(math.factorial(world.size)), dtype=torch.float64))


def test_reduce_scatter_in_place_spanning_segments_is_exact_and_leaves_the_other_blocks(world) -> None:
    n = 2**20 // 8 * 3 + 5  # int64: each block spans 4 one-MiB segments, the last one short
    full = torch.arange(world.size * n, dtype=torch.int64) * (world.rank + 1)
    expected = torch.arange(world.size * n, dtype=torch.int64) * (world.size * (world.size + 1) // 2)
    mine = slice(world.rank * n, (world.rank + 1) * n)
    before = full.clone()
    dist.reduce_scatter_tensor(full[mine], full, group=world.mpi)  # the output is this rank's block of the input
    assert torch.equal(full[mine], expected[mine])
    others = torch.ones(world.size * n, dtype=torch.bool)
    others[mine] = False
    assert torch.equal(full[others], before[others])
    out = torch.empty(n, dtype=torch.float64)
    blocks = [torch.full((n,), float(world.rank + 1 + i), dtype=torch.float64) for i in range(world.size)]
    dist.reduce_scatter(out, blocks, op=dist.ReduceOp.MAX, group=world.mpi)
    assert torch.equal(out, torch.full((n,), float(world.size + world.rank), dtype=torch.float64))


def test_object_collectives(world) -> None:
    g, r, n = world.mpi, world.rank, world.size
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r, "pad": "x" * r}, group=g)
    assert objs == [{"rank": i, "pad": "x" * i} for i in range(n)]
    lst = [r, "a", None] if r == 0 else [None, None, None]
    dist.broadcast_object_list(lst, src=0, group=g)
    assert lst == [0, "a", None]
    out = [None] * n if r == 0 else None
    dist.gather_object(("r", r), out, dst=0, group=g)
    if r == 0:
        assert out == [("r", i) for i in range(n)]
    got = [None]
    dist.scatter_object_list(got, [{"to": i} for i in range(n)] if r == 0 else None, src=0, group=g)
    assert got == [{"to": r}]


def test_all_gather_coalesced_fills_one_list_per_rank_like_gloo(world) -> None:
    r, n = world.rank, world.size
    for g_gloo, g_mpi in world.pairs:
        members = dist.get_process_group_ranks(g_gloo)
        if r not in members:
            continue
        results = []
        for group in (g_gloo, g_mpi):
            ins = [torch.full((2, 2), float(r)), torch.ones(0), torch.full((3,), r + 0.5)]
            outs = [[torch.full_like(t, -1.0) for t in ins] for _ in members]
            dist.all_gather_coalesced(outs, ins, group=group)
            results.append(outs)
        assert [[t.tolist() for t in outs] for outs in results[1]] == [
            [t.tolist() for t in outs] for outs in results[0]
        ]
        assert results[1][-1][2].tolist() == [members[-1] + 0.5] * 3  # list r holds rank r's inputs
    with pytest.raises(ValueError, match="one per rank"):
        dist.all_gather_coalesced([[torch.empty(1)] for _ in range(n + 1)], [torch.ones(1)], group=world.mpi)


def test_functional_collectives(world) -> None:
    import torch.distributed._functional_collectives as fc

    g, r, n = world.mpi, world.rank, world.size
    summed = fc.all_reduce(torch.full((3,), float(r)), "sum", g)
    assert torch.equal(torch.as_tensor(summed), torch.full((3,), float(sum(range(n)))))
    gathered = fc.all_gather_tensor(torch.full((2,), float(r)), 0, g)
    assert torch.equal(torch.as_tensor(gathered), torch.arange(n).float().repeat_interleave(2))
    rs = fc.reduce_scatter_tensor(torch.arange(2 * n).float(), "sum", 0, g)
    assert torch.equal(torch.as_tensor(rs), torch.tensor([2.0 * r, 2.0 * r + 1]) * n)
    a2a = fc.all_to_all_single(torch.arange(n).float() + 10 * r, None, None, g)
    assert torch.equal(torch.as_tensor(a2a), torch.arange(n).float() * 10 + r)
    b = fc.broadcast(torch.full((2,), float(r)), 0, g)
    assert torch.equal(torch.as_tensor(b), torch.zeros(2))
    outs = fc.all_reduce_coalesced([torch.ones(2), torch.ones(3, dtype=torch.float64)], "sum", g)
    assert [torch.as_tensor(o).tolist() for o in outs] == [[float(n)] * 2, [float(n)] * 3]


def test_the_ddp_join_hook_form_a_bare_tensor(world) -> None:
    t = torch.ones(4)
    world.mpi.allreduce(t).wait()
    assert (t == world.size).all()
    t = torch.ones(2)
    world.mpi.broadcast(t, 0).wait()
    world.mpi.barrier().wait()


def test_all_to_all_with_uneven_lists(world) -> None:
    r, n = world.rank, world.size
    ins = [torch.full((j + 1,), r * 100 + j, dtype=torch.int16) for j in range(n)]
    outs = [torch.empty((r + 1,), dtype=torch.int16) for _ in range(n)]
    dist.all_to_all(outs, ins, group=world.mpi)
    assert [o.tolist() for o in outs] == [[s * 100 + r] * (r + 1) for s in range(n)]


def test_the_ledger_records_every_call_once_object_collectives_and_subgroups_included(world) -> None:
    from hpcdist.mpi_backend import record

    g, r, n = world.mpi, world.rank, world.size
    sub = world.pairs[1][1]  # the even ranks
    record.enable()
    try:
        since = time.monotonic()
        objs = [None] * n
        dist.all_gather_object(objs, {"rank": r}, group=g)
        box = [r]
        dist.broadcast_object_list(box, src=0, group=g)
        t = torch.ones(3)
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)  # the Python group's, under the compiled backend too
        dist.all_reduce(t, group=g)
        if r % 2 == 0:
            dist.all_reduce(t, group=sub)
    finally:
        record.enable(False)
    calls = [c for c in record.calls() if c.started >= since]
    assert all(type(c) is Call for c in calls)  # whichever implementation recorded it
    name = str(list(range(n)))
    want = [("all_gather", "", "int64", name), ("all_gather", "", "uint8", name)]
    want += [("broadcast", "root=0", "int64", name), ("broadcast", "root=0", "uint8", name)]
    want += [("all_reduce", "", "float32", name)] * 2
    want += [("all_reduce", "", "float32", str(list(range(0, n, 2))))] if r % 2 == 0 else []
    assert [(c.op, c.peer, c.dtype, c.group) for c in calls] == want  # dtypes as torch names them
    gseqs = [c.gseq for c in calls[:6]]  # the first six are on g (at one rank the subgroup has g's name too)
    assert gseqs == list(range(gseqs[0], gseqs[0] + 6))  # one count per group, whichever implementation ran it
    assert all(c.done and c.ended is not None and c.ended >= c.started > 0 for c in calls)  # every call finished


@pytest.mark.native_backend
def test_the_compiled_ledger_makes_each_call_a_call_field_by_field(world) -> None:
    from hpcdist.mpi_backend import native, record

    module = native.loaded()
    assert module is not None, "the compiled backend is not loaded in this job (it did not build?)"
    g, n = world.mpi, world.size
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    record.enable()
    try:
        since = time.monotonic()
        dist.broadcast(t, src=n - 1, group=g)
        ended = time.monotonic()
    finally:
        record.enable(False)
    mine = [c for c in module.ledger(Call) if c.started >= since]
    assert len(mine) == 1
    call = mine[0]
    assert (call.op, call.peer, call.shape, call.dtype, call.group) == (
        "broadcast",
        f"root={n - 1}",
        (2, 3),
        "Double",  # as c10 names it; record.calls() gives torch's name
        str(list(range(n))),
    )
    assert call.done and since <= call.started <= call.ended <= ended and not call.backward and call.gseq > 0


def test_new_subgroups(world) -> None:
    import hpcdist.mpi_backend as mb

    size = 2 if world.size % 2 == 0 else 1
    mine, groups = dist.new_subgroups(group_size=size, backend="mpi4py")
    assert dist.get_backend(mine) == "mpi4py"
    assert isinstance(mine, mb.MPIProcessGroup) is not mb.native_active()  # the compiled backend is torch's kind
    t = torch.tensor([float(world.rank)])
    dist.all_reduce(t, group=mine)
    first = world.rank - world.rank % size
    assert t.item() == sum(range(first, first + size))
    for g in groups:
        dist.destroy_process_group(g)


def _coalesced_inputs(dtype: torch.dtype, rank: int, count: int, equal: bool) -> list:
    """Global rank `rank`'s inputs to all_gather_coalesced: `count` tensors, of equal or of different sizes."""
    shapes = [(3,) if equal else [(2, 3), (0,), (5,), (1, 2, 2)][j % 4] for j in range(count)]
    return [_data(dtype, shape, 1000 * rank + 10 * j + DTYPES.index(dtype)) for j, shape in enumerate(shapes)]


def test_all_gather_coalesced_lists_outputs_by_rank_then_input_like_gloo(world) -> None:
    """output_lists[r][i] is rank r's input i (torch's docstring, gloo's allgather_coalesced), also with as many
    inputs as ranks, where the transposed layout would fit the shapes and go unnoticed."""
    for pair in world.pairs:
        if pair[1] == dist.GroupMember.NON_GROUP_MEMBER:
            continue
        n, ranks = dist.get_world_size(pair[1]), dist.get_process_group_ranks(pair[1])
        for dtype in DTYPES:
            for count in sorted({n, 3}):
                for equal in (True, False):
                    what = f"{dtype}, {count} inputs of {'equal' if equal else 'different'} sizes, group {ranks}"
                    inputs = _coalesced_inputs(dtype, world.rank, count, equal)
                    expected = [_coalesced_inputs(dtype, r, count, equal) for r in ranks]
                    for g in pair:
                        outputs = [[torch.full_like(t, 7) for t in inputs] for _ in range(n)]
                        dist.all_gather_coalesced(outputs, inputs, group=g)
                        for r in range(n):
                            for got, want in zip(outputs[r], expected[r], strict=True):
                                assert torch.equal(got, want), (
                                    f"{dist.get_backend(g)} {what}: rank {r}: {got} != {want}"
                                )
            out = [[torch.empty(2)] for _ in range(n)]
            dist.all_gather_coalesced(out, [torch.full((2,), float(world.rank))], pair[1], async_op=True).wait()
            assert [o[0].tolist() for o in out] == [[float(r)] * 2 for r in ranks]
            bad = [[torch.empty(2)] for _ in range(n + 1)]  # one output list too many: both backends refuse
            res = _both(pair, lambda g, bad=bad: dist.all_gather_coalesced(bad, [torch.ones(2)], group=g))
            assert all(isinstance(r, Exception) for r in res), res
