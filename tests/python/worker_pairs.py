"""msr_comm_pairs from Python (Comm.pairs) under the real msrun with 4
ranks: every rank paired with every other (the bound, size - 1) and with
its two ring neighbours, each pair ranked by rank with the peer's job
rank, a NumPy message each way and an allreduce on it; pairs made over a
split that outlive it; none at all; and one member's bad list raising on
every member alike (itself, -1, size, listed twice, size peers, a pair
listed by one side only, a peer that is not an integer or past a C int),
the world usable after each. Each rank prints "rank R of N: pairs ok" when
every check passed; the first failed check ends the rank with its message
(run.sh starts it and checks that)."""

import sys

try:
    import numpy as np
except ImportError as e:
    print("SKIP: numpy cannot be imported (Debian: python3-numpy): %s" % e)
    sys.exit(77)

import msrun

NP = 4


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def exchange(comm, peers, pairs, what):
    """Checks pair k against peers[k] of comm: its ranks, a message each
    way, an allreduce. Every rank takes its pairs in the order of (lower,
    higher) rank, so that no wait closes a cycle (each pair progresses
    only while its own calls run)."""
    me = comm.rank
    expect(len(pairs) == len(peers), "%s: %d pairs for %d peers" % (what, len(pairs), len(peers)))
    for peer, p in sorted(zip(peers, pairs), key=lambda x: (min(me, x[0]), max(me, x[0]))):
        mine = 1 if me > peer else 0
        other = 1 - mine
        expect(p.size == 2 and p.rank == mine, "%s: pair with %d: rank %d of %d" % (what, peer, p.rank, p.size))
        expect(p.world_rank(other) == comm.world_rank(peer), "%s: pair with %d: its other member" % (what, peer))
        got = np.zeros(1000, dtype=np.float64)
        req = p.irecv(got, other, tag=3)
        p.send(np.arange(1000, dtype=np.float64) + 1000 * me, other, tag=3)
        req.wait()
        expect(np.array_equal(got, np.arange(1000, dtype=np.float64) + 1000 * peer),
               "%s: pair with %d: the message" % (what, peer))
        s = np.array([me], dtype=np.int64)
        p.allreduce(s)
        expect(int(s[0]) == me + peer, "%s: pair with %d: allreduce %d" % (what, peer, int(s[0])))


def refused(world, what, peers0, exc=msrun.InvalidArgumentError):
    """Rank 0 asks for peers0, the others for no pair: rank 0 raises exc,
    every other InvalidArgumentError, nothing made."""
    me = world.rank
    if me == 0:
        mine, want = peers0, exc
    else:
        mine, want = [], msrun.InvalidArgumentError
    try:
        world.pairs(mine)
    except want as e:
        if me == 0:
            print("refused: %s (%s)" % (what, e), flush=True)
    else:
        raise AssertionError("%s: no %s raised on rank %d" % (what, want.__name__, me))
    world.barrier()  # still usable


def main():
    with msrun.init() as ctx:
        world = ctx.comm_world()
        me, n = world.rank, world.size
        expect(n == NP, "needs %d ranks" % NP)
        # every other rank: the bound
        every = [j for j in range(n) if j != me]
        pairs = world.pairs(every)
        exchange(world, every, pairs, "every other rank")
        for p in pairs:
            p.destroy()
        # the two ring neighbours, in an order of the caller's
        ring = [(me + 1) % n, (me - 1) % n]
        pairs = world.pairs(ring)
        exchange(world, ring, pairs, "ring neighbours")
        for p in pairs:
            p.destroy()
        # over a split that goes before its pairs: ranks of the split
        sub = world.split(me % 2, key=me)
        peers = [1 - sub.rank]
        pairs = sub.pairs(peers)
        expect(pairs[0].world_rank(1 - pairs[0].rank) == sub.world_rank(peers[0]), "split's pair")
        sub.destroy()
        exchange_after = np.array([me], dtype=np.int64)
        pairs[0].allreduce(exchange_after)
        expect(int(exchange_after[0]) == me + (me ^ 2), "a pair after its split went: %d" % int(exchange_after[0]))
        pairs[0].destroy()
        # none
        expect(world.pairs([]) == [], "no pairs")
        # one member's bad list
        refused(world, "itself", [0])
        refused(world, "peer -1", [-1])
        refused(world, "peer = size", [n])
        refused(world, "a peer listed twice", [1, 1])
        refused(world, "size peers, one past", [1, 2, 3, 1])
        refused(world, "not an integer", ["1"], exc=TypeError)
        refused(world, "not a sequence", 1, exc=TypeError)
        refused(world, "past a C int", [2**40], exc=ValueError)
        # listed by one side only: rank 0 lists rank 1, which lists nobody
        try:
            world.pairs([1] if me == 0 else [])
            raise AssertionError("one side only: nothing raised on rank %d" % me)
        except msrun.InvalidArgumentError as e:
            if me == 0:
                print("refused: listed by one side only (%s)" % e, flush=True)
        world.barrier()
        pairs = world.pairs(every)  # nothing left behind that stops a new call
        exchange(world, every, pairs, "every other rank again")
        ctx.barrier()
        print("rank %d of %d: pairs ok" % (ctx.rank, ctx.world_size), flush=True)


if __name__ == "__main__":
    main()
