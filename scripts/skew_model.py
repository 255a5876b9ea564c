"""A time-stepped model of the TMA forward's two consumer warpgroups sharing one SM's
tensor cores, behind CAUSALCONV_CONSUMER_SKEW (NOTES.md, v18): each tile is `taps` taps of
MMA work (one unit = a tap's tensor-core time for one warpgroup alone; two warpgroups
issuing at once each progress at half that rate), then an epilogue of `epilogue` units with
no MMAs.  Neither warpgroup may run more than `ring` taps ahead of the other (the weight
slots and x tiles they share); warpgroup 2 starts once warpgroup 1 has issued `skew` taps.
Prints the tensor cores' busy share for a few settings.
    python scripts/skew_model.py"""


def busy_share(taps=32, epilogue=4.0, ring=6, skew=0, tiles=40, dt=0.01):
    done, epi, started = [0.0, 0.0], [0.0, 0.0], [True, skew == 0]
    total, t, busy = taps * tiles, 0.0, 0.0
    while min(done) < total:
        if not started[1] and done[0] >= skew:
            started[1] = True
        active = [i for i in (0, 1) if started[i] and done[i] < total and epi[i] <= 0 and done[i] - done[1 - i] < ring]
        if active:
            busy += dt
        for i in (0, 1):
            if epi[i] > 0:
                epi[i] -= dt
            elif i in active:
                before = done[i]
                done[i] += dt / len(active)
                if int(before) // taps != int(done[i]) // taps:  # a tile's last tap retired
                    epi[i] = epilogue
        t += dt
    return busy / t


for epilogue in (2.0, 4.0):
    for skew in (0, 1, 2, 4):
        print(f"epilogue {epilogue:.0f} taps, skew {skew}: tensor cores busy {busy_share(epilogue=epilogue, skew=skew):.3f}")
