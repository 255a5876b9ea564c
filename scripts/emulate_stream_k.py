"""The Stream-K work split of the raw-window fp32 forward (kernels/stream_k.cuh: plan_stream_k,
SegmentWalk; kernels/fwd_rs.cu: first_stage, stage_taps) replayed on the CPU for several grid
sizes and problems, in modes 1 (last waves) and 2 (every tile) of CAUSALCONV_STREAM_K, checking what the kernel relies on:
  - every (tile, unit) runs exactly once;
  - a tile is cut at most once, its head the last segment of block b, its tail the first
    Stream-K segment of block b + 1 (slot b + 1 of the partial sums);
  - the stages and taps a segment walks are exactly its units (stages of tpg taps, K not a
    multiple of tpg included);
and prints each plan's longest block against whole tiles, in units.
    python scripts/emulate_stream_k.py"""


def cdiv(a, b):
    return -(-a // b)


def plan(tiles, units, grid, mode=1):
    waves = tiles // grid
    if waves >= 1 and mode == 2:  # every tile shared out
        return 0, tiles * units
    if waves < 1 or tiles % grid == 0:
        return tiles, 0
    dp, sk = (waves - 1) * grid, (tiles - (waves - 1) * grid) * units
    whole, split = (waves + 1) * units, (waves - 1) * units + cdiv(sk, grid) + units // 8 + 1
    return (tiles, 0) if split * 100 > whole * 99 else (dp, sk)


def walk(units, grid, dp, sk, b):
    segs, tile = [], b
    while tile < dp:
        segs.append((tile, 0, units))
        tile += grid
    pos, end = sk * b // grid, sk * (b + 1) // grid
    while pos < end:
        u0 = pos % units
        u1 = min(units, u0 + end - pos)
        segs.append((dp + pos // units, u0, u1))
        pos += u1 - u0
    return segs


def segment_units(u0, u1, K, tpg):
    """The units the kernel's stage loop visits for one segment."""
    ngroups = cdiv(K, tpg)
    first = lambda u: u // K * ngroups + u % K // tpg  # noqa: E731
    out = []
    for j in range(first(u0), first(u1 - 1) + 1):
        ic, k0 = j // ngroups, (j % ngroups) * tpg
        u = ic * K + k0
        lo, hi = max(0, u0 - u), min(min(tpg, K - k0), u1 - u)
        assert lo < hi, "a stage without taps would break the raw-window ring's release"
        out += [u + kk for kk in range(lo, hi)]
    return out


def check(tiles, n_ic, K, tpg, grid, mode):
    units = n_ic * K
    dp, sk = plan(tiles, units, grid, mode)
    blocks = [walk(units, grid, dp, sk, b) for b in range(min(tiles, grid))]
    owner = {}
    for b, segs in enumerate(blocks):
        stream_k = [s for s in segs if s[0] >= dp]
        for tile, u0, u1 in segs:
            assert segment_units(u0, u1, K, tpg) == list(range(u0, u1))
            for u in range(u0, u1):
                assert (tile, u) not in owner
                owner[(tile, u)] = b
            if u0 > 0:  # a tail: the block's first Stream-K segment, to the tile's end
                assert u1 == units and stream_k[0] == (tile, u0, u1)
            elif u1 < units:  # a head: the block's last segment, its tail next door
                assert segs[-1] == (tile, u0, u1)
                assert [s for s in blocks[b + 1] if s[0] >= dp][0] == (tile, u1, units)
    assert len(owner) == tiles * units
    longest = max(sum(u1 - u0 for _, u0, u1 in segs) for segs in blocks)
    return dp, sk, longest, cdiv(tiles, grid) * units


if __name__ == "__main__":
    for mode, grid in [(m, g) for m in (1, 2) for g in (132, 114, 78, 144)]:
        for tiles, n_ic, K, tpg in ((grid // 8 + 1) * 8, 4, 4, 4), ((grid // 8 + 1) * 8, 4, 5, 4), \
                ((grid // 32 + 1) * 32, 4, 3, 3), ((2 * grid // 10 + 1) * 10, 4, 4, 4), (2048, 8, 4, 4), \
                (4096, 8, 4, 4), (1024, 32, 4, 4), (512, 4, 7, 4), (12288, 10, 4, 4), (5, 4, 4, 4), \
                (1000, 3, 40, 2):
            dp, sk, longest, whole = check(tiles, n_ic, K, tpg, grid, mode)
            print(f"mode {mode} grid {grid:3d} tiles {tiles:5d} units {n_ic * K:3d}: whole tiles {dp:5d}, "
                  f"longest block {longest} units (whole tiles only: {whole})")
    print("ok")
