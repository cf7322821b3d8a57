"""msrun's c10d store (msrun.torch.store()) held to what torch's own
StoreTestBase checks of its stores, with the same checks run on torch's
TCPStore and FileStore in the same process, so that each expectation is
torch's behaviour, not only ours: set/get, a get that waits for a later
set, get and wait timing out with the store's timeout, add (from 0,
negative), compare_set (key missing, empty, matched, not matched), wait on
several keys, delete_key, large, empty and binary values, keys with odd
characters (control bytes, '%', an empty key, non-ASCII), set_timeout and
num_keys: StoreTestBase's test_set_get count on fresh stores (TCPStore
counts one key of its own, FileStore and msrun's store none), then the
count after new keys, a key set twice, counters, an escaped key and
deletes; and the msrun store's watch_key (torch 1.13's Python TCPStore has
none to compare with): create, update, a write of the same value, delete,
a counter, an escaped key, a callback that raises, stop_watches. Prints
"rank R of N: torchstore ok"."""

import os
import queue
import tempfile
import threading
from datetime import timedelta

from torch_worker import dist, mt, torch  # noqa: F401

R = 0


def expect(cond, what):
    if not cond:
        raise AssertionError("rank %d: %s" % (R, what))


def raises(call, what):
    try:
        call()
    except RuntimeError:
        return
    raise AssertionError("rank %d: %s did not raise" % (R, what))


def absent(s, key):
    """key is not in s: a get raises within a short store timeout (torch's
    Python Store has no check())."""
    s.set_timeout(timedelta(milliseconds=200))
    try:
        s.get(key)
    except RuntimeError:
        return True
    finally:
        s.set_timeout(timedelta(seconds=30))
    return False


def check_store(name, s, second):
    """StoreTestBase's behaviours on s; second() opens another client of the
    same store (for a getter in another thread)."""
    p = name + "/"  # the msrun store is the job's: keys of this check only
    s.set_timeout(timedelta(seconds=30))
    s.set(p + "key0", "value0")
    s.set(p + "key1", b"value1")
    expect(s.get(p + "key0") == b"value0" and s.get(p + "key1") == b"value1", name + ": set/get")
    s.set(p + "key0", "value2")
    expect(s.get(p + "key0") == b"value2", name + ": set replaces")
    # a get waiting for a later set, from another client in another thread
    got, started = [], threading.Event()

    def getter():
        other = second()
        started.set()
        got.append(other.get(p + "late"))
    t = threading.Thread(target=getter)
    t.start()
    started.wait(30)
    s.set(p + "late", "arrived")
    t.join(30)
    expect(not t.is_alive() and got == [b"arrived"], name + ": a get waits for the set")
    # add: absent counts as 0, negative deltas, read back as decimal text
    expect(s.add(p + "cnt", 0) == 0, name + ": add to an absent key starts at 0")
    expect(s.add(p + "cnt", 5) == 5 and s.add(p + "cnt", -7) == -2, name + ": add, negative")
    expect(s.get(p + "cnt") == b"-2", name + ": a counter reads as decimal text")
    # compare_set: TCPStore's and FileStore's rule
    expect(s.compare_set(p + "cas", "", "first") == b"first", name + ": compare_set, absent key, expected empty")
    expect(s.compare_set(p + "cas2", "exp", "x") == b"exp", name + ": compare_set, absent key, expected given")
    expect(absent(s, p + "cas2"), name + ": compare_set with a wrong expected value sets nothing")
    expect(s.compare_set(p + "cas", "first", "second") == b"second", name + ": compare_set, matched")
    expect(s.compare_set(p + "cas", "nope", "third") == b"second", name + ": compare_set, not matched")
    expect(s.get(p + "cas") == b"second", name + ": an unmatched compare_set swaps nothing")
    s.set(p + "empty", b"")
    expect(s.get(p + "empty") == b"", name + ": an empty value")
    expect(s.compare_set(p + "empty", "", "filled") == b"filled", name + ": compare_set, empty value, expected empty")
    # wait: several keys; a key never set times out (given, and the store's)
    s.wait([p + "key0", p + "key1", p + "cnt"])
    s.wait([p + "key0", p + "key1"], timedelta(seconds=10))
    raises(lambda: s.wait([p + "key0", p + "never"], timedelta(milliseconds=200)), name + ": wait with a timeout")
    s.set_timeout(timedelta(milliseconds=200))
    raises(lambda: s.get(p + "never"), name + ": get with the store's timeout")
    raises(lambda: s.wait([p + "never"]), name + ": wait with the store's timeout")
    s.set_timeout(timedelta(seconds=30))
    # delete_key
    expect(s.delete_key(p + "key1"), name + ": delete_key")
    # a key already gone: False (FileStore answers True whatever the key)
    expect(name == "file" or not s.delete_key(p + "key1"), name + ": delete_key of an absent key")
    expect(absent(s, p + "key1"), name + ": a deleted key is gone")
    # values: large, binary (every byte, NUL included)
    big = bytes(range(256)) * 4096 + b"\0end"  # 1 MiB and 4 bytes
    s.set(p + "big", big)
    expect(s.get(p + "big") == big, name + ": a large binary value")
    # keys: control bytes, '%' and its escapes, non-ASCII, the empty key
    odd = ["a b/c:d=e?", "tab\there", "nl\n", "pct%", "%0A", "%", "é∂", "\x01\x7f", "nul\0inside", "nul"]
    for i, k in enumerate(odd):
        s.set(p + k, "odd%d" % i)
    for i, k in enumerate(odd):
        expect(s.get(p + k) == ("odd%d" % i).encode(), name + ": key %r" % k)
    s.set("", "the empty key")
    expect(s.get("") == b"the empty key", name + ": the empty key")
    expect(s.delete_key(""), name + ": delete the empty key")


# keys a fresh store holds before any is set: TCPStore's server keeps one
# of its own (the "init/" counter its clients add to when they connect)
OWN_KEYS = {"tcp": 1, "file": 0, "msrun": 0}


def check_set_get_count(name, s):
    """StoreTestBase._test_set_get's writes and num_keys on a fresh store:
    5 keys ("key", "key0".."key3"), plus the store's own."""
    # (a FileStore never written has no file yet: its num_keys waits for
    # one up to its timeout)
    expect(name == "file" or s.num_keys() == OWN_KEYS[name], name + ": num_keys of a fresh store")
    for i in (1, 2, 3):
        s.add("key", i)
    s.set("key0", "value0")
    s.add("key3", 1)
    s.set("key1", "value1")
    s.add("key3", 2)
    s.set("key2", "value2")
    for i in (3, 4, 5, 6):
        s.add("key3", i)
    n = s.num_keys()
    expect(n == 5 + OWN_KEYS[name], "%s: num_keys %d after test_set_get's writes" % (name, n))
    expect(s.get("key") == b"6" and s.get("key3") == b"21", name + ": the counters")


def check_num_keys(name, s):
    """The count follows new keys, a key set twice, counters, an escaped
    key and deletes alike on every store."""
    before = s.num_keys()
    s.set("numkeys/a", "1")
    s.add("numkeys/b", 1)
    expect(s.num_keys() == before + 2, name + ": num_keys counts new keys")
    s.set("numkeys/a", "2")
    s.add("numkeys/b", 1)
    expect(s.num_keys() == before + 2, name + ": a key set twice, a counter added to twice")
    s.set("numkeys/\n%", "escaped")
    expect(s.num_keys() == before + 3, name + ": a key with escaped characters")
    expect(s.delete_key("numkeys/a"), name + ": delete_key")
    expect(s.num_keys() == before + 2, name + ": num_keys after delete_key")
    s.delete_key("numkeys/a")
    expect(s.num_keys() == before + 2, name + ": num_keys after a delete of a key gone")


def check_watch_key(s, second):
    """watch_key's callbacks, TCPStore's rule: (None, new) on create, (old,
    new) on update, (old, None) on delete; writes from another client."""
    w = second()
    got = queue.Queue()
    s.watch_key("watch/k", lambda old, new: got.put((old, new)))

    def next_event(what):
        try:
            return got.get(timeout=30)
        except queue.Empty:
            raise AssertionError("rank %d: watch_key: no callback for %s" % (R, what)) from None

    w.set("watch/k", "a")
    ev = next_event("create")
    expect(ev == (None, b"a"), "watch_key: create gave %r" % (ev,))
    w.set("watch/k", "a")  # the same value: no change
    w.set("watch/k", b"b\0c")
    ev = next_event("update")
    expect(ev == (b"a", b"b\0c"), "watch_key: update gave %r" % (ev,))
    expect(w.delete_key("watch/k"), "watch_key: delete_key")
    ev = next_event("delete")
    expect(ev == (b"b\0c", None), "watch_key: delete gave %r" % (ev,))
    # each write after the callback of the one before: changes quicker
    # than the callbacks may be seen as one
    w.add("watch/k", 1)
    evs = [next_event("add")]
    w.add("watch/k", 0)  # "1" again: no change
    w.add("watch/k", 2)
    evs.append(next_event("add"))
    expect(evs == [(None, b"1"), (b"1", b"3")], "watch_key: adds gave %r" % (evs,))
    # an escaped key, and a callback that raises: the watch goes on
    calls = []

    def bad(old, new):
        calls.append((old, new))
        got.put((old, new))
        raise ValueError("a callback that raises")

    s.watch_key("watch/\n%", bad)
    w.set("watch/\n%", "x")
    evs = [next_event("escaped key")]
    w.set("watch/\n%", "y")
    evs.append(next_event("escaped key after a raise"))
    expect(evs == [(None, b"x"), (b"x", b"y")], "watch_key: escaped key gave %r" % (evs,))
    # stopped: the watches' threads are gone, no callback follows
    s.stop_watches()
    w.set("watch/k", "after")
    w.get("watch/k")
    expect(got.empty(), "watch_key: a callback after stop_watches: %r" % (got.queue,))
    raises(lambda: s.watch_key("watch/k", got.put), "watch_key after stop_watches")


def main():
    global R
    torch.set_num_threads(1)
    ctx = mt.context()
    R = ctx.rank
    tcp = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
    # two clients of the file (a second one in check_store): the last to go
    # removes it
    path = os.path.join(tempfile.mkdtemp(prefix="torchstore"), "filestore")
    stores = (("tcp", tcp, lambda: dist.TCPStore("127.0.0.1", tcp.port, 1, False, timedelta(seconds=30))),
              ("file", dist.FileStore(path, 2), lambda: dist.FileStore(path, 2)),
              ("msrun", mt.store(), mt.store))
    try:
        for name, s, _ in stores:
            check_set_get_count(name, s)
        for name, s, second in stores:
            check_store(name, s, second)
            check_num_keys(name, s)
            print("rank %d: the %s store passed" % (R, name), flush=True)
        check_watch_key(mt.store(), mt.store)
        print("rank %d: watch_key passed" % R, flush=True)
    finally:
        for f in os.listdir(os.path.dirname(path)):
            os.unlink(os.path.join(os.path.dirname(path), f))
        os.rmdir(os.path.dirname(path))
    print("rank %d of %d: torchstore ok" % (R, ctx.world_size), flush=True)


main()
