"""One driver per kind: random operations applied to the persisted object and to its
builtin twin, with results (and exceptions) compared at every step."""
from __future__ import annotations

import collections
import random

import pytest
from sortedcontainers import SortedDict, SortedSet

from objectspace import AlreadyExistsError
from .os_stream_model import StreamModel, fid


def rand_value(rng: random.Random):
    r = rng.random()
    if r < 0.3:
        return rng.randint(-1000, 1000)
    if r < 0.5:
        return "v" * rng.randint(0, 4) + str(rng.randint(0, 99))
    if r < 0.58:
        return None
    if r < 0.66:
        return (rng.randint(0, 9), "t")
    if r < 0.74:
        return [rng.randint(0, 9)] * rng.randint(0, 3)
    if r < 0.82:
        return {"k": rng.randint(0, 9), "n": [1.5]}
    if r < 0.9:
        return rng.random()
    return rng.randbytes(rng.randint(0, 6))


def rand_key(rng: random.Random, keytype: str):
    if keytype == "int":
        r = rng.random()
        if r < 0.05:
            return rng.choice([-1, 1]) * rng.randint(1 << 64, 1 << 200)
        return rng.randint(-60, 60)
    if keytype == "str":
        return "".join(rng.choice("ab\x00é") for _ in range(rng.randint(0, 3)))
    return (rng.choice(["u", "w"]), rng.randint(0, 25))


def same(model_fn, obj_fn, *, exc_map=None):
    """Run the op on the twin, then on the object: same result or same exception type."""
    try:
        want = model_fn()
    except Exception as e:  # noqa: BLE001
        kind = (exc_map or {}).get(type(e), type(e))
        with pytest.raises(kind):
            obj_fn()
        return None
    got = obj_fn()
    assert got == want, (got, want)
    return got


class Driver:
    kind = ""
    keytype = "int"

    def create(self, space, name, rng):
        raise NotImplementedError

    def get(self, space, name):
        return getattr(space, f"get_{self.kind}")(name)

    def copy(self, model):
        return collections.deque(model) if isinstance(model, collections.deque) else type(model)(model)

    def check(self, obj, model) -> None:
        assert len(obj) == len(model)
        assert list(obj) == list(model)


class ValueDriver(Driver):
    kind = "value"

    def create(self, space, name, rng):
        v = rand_value(rng)
        return space.create_value(name, v), [v]

    def copy(self, model):
        return list(model)

    def step(self, rng, obj, model):
        if rng.random() < 0.6:
            v = rand_value(rng)
            obj.value = v
            model[0] = v
        assert obj.value == model[0]

    def check(self, obj, model):
        assert obj.value == model[0]


class ArrayDriver(Driver):
    kind = "array"

    def create(self, space, name, rng):
        n = rng.randint(0, 12)
        return space.create_array(name, n, fill=0), [0] * n

    def step(self, rng, obj, model):
        n = len(model)
        r = rng.random()
        i = rng.randint(-n - 1, n) if n else 0
        if r < 0.45:
            v = rand_value(rng)
            same(lambda: model.__setitem__(i, v), lambda: obj.__setitem__(i, v))
        elif r < 0.8:
            same(lambda: model[i], lambda: obj[i])
        elif r < 0.9:
            s = slice(rng.randint(0, n), rng.randint(0, n), rng.choice([1, 2, -1]))
            vals = [rand_value(rng) for _ in range(len(range(*s.indices(n))))]
            same(lambda: model.__setitem__(s, vals), lambda: obj.__setitem__(s, vals))
            same(lambda: model[s], lambda: obj[s])
        elif r < 0.95:
            v = rand_value(rng)
            same(lambda: model.count(v), lambda: obj.count(v))
        else:
            v = rng.randint(0, 5)
            obj.fill(v)
            model[:] = [v] * n


class ListDriver(Driver):
    kind = "list"

    def create(self, space, name, rng):
        items = [rand_value(rng) for _ in range(rng.randint(0, 6))]
        return space.create_list(name, items), list(items)

    def check(self, obj, model) -> None:
        super().check(obj, model)
        assert obj == model

    def step(self, rng, obj, model):
        n = len(model)
        i = rng.randint(-n - 2, n + 1)
        r = rng.random()
        if r < 0.02:
            k = rng.randint(-1, 3)
            obj *= k
            model *= k
            assert obj + [1] == model + [1] and obj * 2 == model * 2
        elif r < 0.25:
            v = rand_value(rng)
            obj.append(v)
            model.append(v)
        elif r < 0.35:
            v = rand_value(rng)
            obj.insert(i, v)
            model.insert(i, v)
        elif r < 0.45:
            same(lambda: model.pop(), lambda: obj.pop())
        elif r < 0.5:
            same(lambda: model.pop(i), lambda: obj.pop(i))
        elif r < 0.55:
            same(lambda: model.__delitem__(i), lambda: obj.__delitem__(i))
        elif r < 0.65:
            v = rand_value(rng)
            same(lambda: model.__setitem__(i, v), lambda: obj.__setitem__(i, v))
        elif r < 0.72:
            same(lambda: model[i], lambda: obj[i])
        elif r < 0.75:
            v = model[rng.randrange(n)] if n and rng.random() < 0.7 else rand_value(rng)
            same(lambda: model.remove(v), lambda: obj.remove(v))
        elif r < 0.8:
            vals = [rand_value(rng) for _ in range(rng.randint(0, 3))]
            obj.extend(vals)
            model.extend(vals)
        elif r < 0.86:
            s = slice(rng.randint(-n, n), rng.randint(-n, n), rng.choice([None, 1, 2, -1]))
            same(lambda: model[s], lambda: obj[s])
            if rng.random() < 0.5:
                same(lambda: model.__delitem__(s), lambda: obj.__delitem__(s))
            else:
                size = len(range(*s.indices(n))) if s.step not in (None, 1) else rng.randint(0, 3)
                vals = [rand_value(rng) for _ in range(size)]
                same(lambda: model.__setitem__(s, vals), lambda: obj.__setitem__(s, vals))
        elif r < 0.89:
            rev = rng.random() < 0.5
            obj.sort(key=repr, reverse=rev)
            model.sort(key=repr, reverse=rev)
        elif r < 0.91:
            obj.reverse()
            model.reverse()
        elif r < 0.92:
            obj.clear()
            model.clear()
        else:
            v = model[rng.randrange(n)] if n and rng.random() < 0.7 else rand_value(rng)
            same(lambda: model.index(v), lambda: obj.index(v))
            assert (v in obj) == (v in model)


class QueueDriver(Driver):
    kind = "queue"
    maxlen = None

    def create(self, space, name, rng):
        items = [rand_value(rng) for _ in range(rng.randint(0, 4))]
        return space.create_queue(name, items, maxlen=self.maxlen), collections.deque(items, self.maxlen)

    def copy(self, model):
        return collections.deque(model, model.maxlen)

    def check(self, obj, model) -> None:
        super().check(obj, model)
        assert obj == model and obj.maxlen == model.maxlen

    def step(self, rng, obj, model):
        n = len(model)
        r = rng.random()
        if r < 0.3:
            v = rand_value(rng)
            obj.append(v)
            model.append(v)
        elif r < 0.55:
            same(lambda: model.popleft(), lambda: obj.popleft())
        elif r < 0.59:
            same(lambda: model.pop(), lambda: obj.pop())
        elif r < 0.65:
            i = rng.randint(-n - 1, n)
            same(lambda: model[i], lambda: obj[i])
        elif r < 0.68:
            i = rng.randint(-n - 1, n)
            v = rand_value(rng)
            same(lambda: model.__setitem__(i, v), lambda: obj.__setitem__(i, v))
        elif r < 0.70:
            same(lambda: model[0], lambda: obj.peek())
        elif r < 0.72:
            vals = [rand_value(rng) for _ in range(rng.randint(0, 4))]
            obj.extend(vals)
            model.extend(vals)
        elif r < 0.73:
            obj.clear()
            model.clear()
        elif r < 0.80:                  # the deque's left end and middle
            v = rand_value(rng)
            obj.appendleft(v)
            model.appendleft(v)
        elif r < 0.82:
            vals = [rand_value(rng) for _ in range(rng.randint(0, 3))]
            obj.extendleft(vals)
            model.extendleft(vals)
        elif r < 0.86:
            k = rng.randint(-n - 2, n + 2)
            obj.rotate(k)
            model.rotate(k)
        elif r < 0.89:
            i, v = rng.randint(-n - 1, n + 1), rand_value(rng)
            same(lambda: model.insert(i, v), lambda: obj.insert(i, v))
        elif r < 0.92:
            i = rng.randint(-n - 1, n)
            same(lambda: model.__delitem__(i), lambda: obj.__delitem__(i))
        elif r < 0.94:
            v = model[rng.randrange(n)] if n and rng.random() < 0.7 else rand_value(rng)
            same(lambda: model.remove(v), lambda: obj.remove(v))
        elif r < 0.95:
            obj.reverse()
            model.reverse()
        elif r < 0.97:
            v = model[rng.randrange(n)] if n else 0
            same(lambda: model.index(v), lambda: obj.index(v))
            assert obj.count(v) == model.count(v)
        else:
            assert list(reversed(obj)) == list(reversed(model))


class BoundedQueueDriver(QueueDriver):
    maxlen = 5


class StackDriver(Driver):
    kind = "stack"

    def create(self, space, name, rng):
        items = [rand_value(rng) for _ in range(rng.randint(0, 4))]
        return space.create_stack(name, items), list(items)

    def check(self, obj, model):
        assert len(obj) == len(model)
        assert list(obj) == model[::-1]

    def step(self, rng, obj, model):
        r = rng.random()
        if r < 0.45:
            v = rand_value(rng)
            obj.push(v)
            model.append(v)
        elif r < 0.85:
            same(lambda: model.pop(), lambda: obj.pop())
        elif r < 0.93:
            same(lambda: model[-1], lambda: obj.peek())
        elif r < 0.97:
            vals = [rand_value(rng) for _ in range(rng.randint(0, 3))]
            obj.extend(vals)
            model.extend(vals)
        elif r < 0.98:
            obj.clear()
            model.clear()
        else:
            v = model[-1] if model else 0
            assert (v in obj) == (v in model)


class LinkedListDriver(Driver):
    kind = "linked_list"

    def create(self, space, name, rng):
        items = [rand_value(rng) for _ in range(rng.randint(0, 4))]
        return space.create_linked_list(name, items), list(items)

    @staticmethod
    def node_at(obj, i):
        node = obj.first
        for _ in range(i):
            node = node.next
        return node

    def check(self, obj, model):
        super().check(obj, model)
        assert list(reversed(obj)) == model[::-1]
        assert (obj.first.value if model else None) == (model[0] if model else None)
        assert (obj.last.value if model else None) == (model[-1] if model else None)

    def step(self, rng, obj, model):
        n = len(model)
        r = rng.random()
        v = rand_value(rng)
        if r < 0.15:
            obj.add_first(v)
            model.insert(0, v)
        elif r < 0.35:
            obj.add_last(v)
            model.append(v)
        elif r < 0.5 and n:
            i = rng.randrange(n)
            new = obj.add_after(self.node_at(obj, i), v)
            model.insert(i + 1, v)
            assert new.value is v and new.prev.value == model[i]
        elif r < 0.6 and n:
            i = rng.randrange(n)
            obj.add_before(self.node_at(obj, i), v)
            model.insert(i, v)
        elif r < 0.75 and n:
            i = rng.randrange(n)
            node = self.node_at(obj, i)
            obj.remove(node)
            del model[i]
            assert node.list is None
        elif r < 0.8:
            w = model[rng.randrange(n)] if n and rng.random() < 0.7 else v
            same(lambda: model.remove(w), lambda: obj.remove(w))
        elif r < 0.87:
            same(lambda: model.pop(0), lambda: obj.remove_first())
        elif r < 0.9:
            same(lambda: model.pop(), lambda: obj.remove_last())
        elif r < 0.97 and n:
            i = rng.randrange(n)
            self.node_at(obj, i).value = v
            model[i] = v
        else:
            w = model[rng.randrange(n)] if n and rng.random() < 0.7 else v
            node = obj.find(w)
            assert (node is None) == (w not in model)
            if node is not None:
                assert node.value == w


class SetDriver(Driver):
    kind = "set"
    twin = set

    def __init__(self, keytype: str = "int") -> None:
        self.keytype = keytype

    def create(self, space, name, rng):
        items = [rand_key(rng, self.keytype) for _ in range(rng.randint(0, 5))]
        return getattr(space, f"create_{self.kind}")(name, items), self.twin(items)

    def check(self, obj, model):
        assert len(obj) == len(model)
        assert set(obj) == set(model)
        assert obj == set(model)

    def step(self, rng, obj, model):
        k = rand_key(rng, self.keytype)
        r = rng.random()
        if r < 0.35:
            obj.add(k)
            model.add(k)
        elif r < 0.6:
            obj.discard(k)
            model.discard(k)
        elif r < 0.7:
            same(lambda: model.remove(k), lambda: obj.remove(k))
        elif r < 0.85:
            assert (k in obj) == (k in model)
        elif r < 0.9:
            ks = [rand_key(rng, self.keytype) for _ in range(3)]
            obj.update(ks)
            model.update(ks)
        elif r < 0.91:
            obj.clear()
            model.clear()
        else:
            self.step_extra(rng, obj, model, k)

    def step_extra(self, rng, obj, model, k):
        if model and rng.random() < 0.5:
            v = obj.pop()
            model.remove(v)
        else:
            assert (obj & {k}) == (model & {k})


class SortedSetDriver(SetDriver):
    kind = "sorted_set"
    twin = SortedSet

    def copy(self, model):
        return SortedSet(model)

    def check(self, obj, model):
        assert len(obj) == len(model)
        assert list(obj) == list(model)
        assert list(reversed(obj)) == list(reversed(model))

    def step_extra(self, rng, obj, model, k):
        n = len(model)
        r = rng.random()
        i = rng.randint(-n - 1, n)
        if r < 0.15:
            same(lambda: model[i], lambda: obj[i])
        elif r < 0.3:
            same(lambda: model.pop(i), lambda: obj.pop(i))
        elif r < 0.4:
            same(lambda: model.__delitem__(i), lambda: obj.__delitem__(i))
        elif r < 0.55:
            same(lambda: model.index(k), lambda: obj.index(k))
            assert obj.bisect_left(k) == model.bisect_left(k)
            assert obj.bisect_right(k) == model.bisect_right(k)
        elif r < 0.85:
            lo, hi = sorted([rand_key(rng, self.keytype), rand_key(rng, self.keytype)])
            inc = (rng.random() < 0.5, rng.random() < 0.5)
            rev = rng.random() < 0.3
            lo = None if rng.random() < 0.1 else lo
            hi = None if rng.random() < 0.1 else hi
            assert list(obj.irange(lo, hi, inc, rev)) == list(model.irange(lo, hi, inc, rev))
        else:
            a, b = sorted([rng.randint(0, n + 1), rng.randint(0, n + 1)])
            rev = rng.random() < 0.5
            assert list(obj.islice(a, b, rev)) == list(model.islice(a, b, rev))
            assert obj[a:b] == list(model[a:b])


class DictDriver(Driver):
    kind = "dict"
    twin = dict

    def __init__(self, keytype: str = "int") -> None:
        self.keytype = keytype

    def create(self, space, name, rng):
        items = {rand_key(rng, self.keytype): rand_value(rng) for _ in range(rng.randint(0, 5))}
        return getattr(space, f"create_{self.kind}")(name, items), self.twin(items)

    def check(self, obj, model):
        assert len(obj) == len(model)
        assert dict(obj.items()) == dict(model)
        assert set(obj) == set(model)
        assert obj == dict(model)

    def step(self, rng, obj, model):
        k = rand_key(rng, self.keytype)
        r = rng.random()
        if r < 0.35:
            v = rand_value(rng)
            obj[k] = v
            model[k] = v
        elif r < 0.5:
            same(lambda: model.__delitem__(k), lambda: obj.__delitem__(k))
        elif r < 0.55:
            same(lambda: model.pop(k, "dflt"), lambda: obj.pop(k, "dflt"))
        elif r < 0.7:
            same(lambda: model[k], lambda: obj[k])
            assert obj.get(k, "dflt") == model.get(k, "dflt")
            assert (k in obj) == (k in model)
        elif r < 0.75:
            v = rand_value(rng)
            same(lambda: model.setdefault(k, v), lambda: obj.setdefault(k, v))
        elif r < 0.8:
            upd = {rand_key(rng, self.keytype): rand_value(rng) for _ in range(3)}
            obj.update(upd)
            model.update(upd)
        elif r < 0.81:
            obj.clear()
            model.clear()
        else:
            self.step_extra(rng, obj, model, k)

    def step_extra(self, rng, obj, model, k):
        if model:
            key, v = obj.popitem()
            assert model.pop(key) == v
        assert sorted(map(repr, obj.values())) == sorted(map(repr, model.values()))


class SortedDictDriver(DictDriver):
    kind = "sorted_dict"
    twin = SortedDict

    def copy(self, model):
        return SortedDict(model)

    def check(self, obj, model):
        assert len(obj) == len(model)
        assert list(obj.items()) == list(model.items())
        assert list(reversed(obj)) == list(reversed(model))

    def step_extra(self, rng, obj, model, k):
        n = len(model)
        r = rng.random()
        i = rng.randint(-n - 1, n)
        if r < 0.2:
            same(lambda: model.peekitem(i), lambda: obj.peekitem(i))
        elif r < 0.35:
            same(lambda: model.popitem(i), lambda: obj.popitem(i), exc_map={IndexError: (IndexError, KeyError)})
        elif r < 0.5:
            same(lambda: model.index(k), lambda: obj.index(k))
            assert obj.bisect_left(k) == model.bisect_left(k)
            assert obj.bisect_right(k) == model.bisect_right(k)
        elif r < 0.85:
            lo, hi = sorted([rand_key(rng, self.keytype), rand_key(rng, self.keytype)])
            inc = (rng.random() < 0.5, rng.random() < 0.5)
            rev = rng.random() < 0.3
            assert list(obj.irange(lo, hi, inc, rev)) == list(model.irange(lo, hi, inc, rev))
        else:
            a, b = sorted([rng.randint(0, n + 1), rng.randint(0, n + 1)])
            assert list(obj.islice(a, b)) == list(model.islice(a, b))
            assert list(obj.keys()) == list(model.keys())


class StreamDriver(Driver):
    kind = "stream"
    clock = None      # set by the harness: an object with .now (ms), shared with the space

    def create(self, space, name, rng):
        return space.create_stream(name), StreamModel()

    def copy(self, model):
        return model.copy()

    def check(self, obj, model):
        assert len(obj) == len(model.entries)
        assert list(obj) == model.range("-", "+", None)
        assert obj.last_generated_id == fid(model.last)
        assert (obj.first_id, obj.last_id) == (model.first_id(), model.last_id())
        assert {g["name"]: g["last_delivered_id"] for g in obj.groups()} == {
            n: fid(g["last"]) for n, g in model.groups.items()}
        for g in model.groups:
            assert obj.pending(g) == model.pending(g)

    def _some_id(self, rng, model) -> str:
        if model.entries and rng.random() < 0.7:
            return fid(model.entries.keys()[rng.randrange(len(model.entries))])
        return f"{max(0, model.last[0] + rng.randint(-3, 1))}-{rng.randint(0, 2)}"

    def _bound(self, rng, model, end: bool) -> str:
        r = rng.random()
        if r < 0.2:
            return "+" if end else "-"
        if r < 0.4:
            return str(max(0, model.last[0] + rng.randint(-8, 1)))
        return self._some_id(rng, model)

    def step(self, rng, obj, model):
        self.clock.now += rng.choice([0, 0, 1, 2, 5])
        now = self.clock.now
        r = rng.random()
        group = rng.choice(["g1", "g2"])
        consumer = rng.choice(["c1", "c2"])
        count = rng.choice([None, 1, 2, 5])
        if r < 0.3:
            f = {"f": rand_value(rng)}
            same(lambda: model.add(f, "*", now), lambda: obj.add(f))
        elif r < 0.35:
            f = {"f": rand_value(rng), "g": 1}
            ms = max(1, model.last[0] + rng.randint(-1, 2))
            ident = f"{ms}-*" if rng.random() < 0.4 else f"{ms}-{rng.randint(0, 3)}"
            same(lambda: model.add(f, ident, now), lambda: obj.add(f, ident))
        elif r < 0.42:
            ids = [self._some_id(rng, model) for _ in range(rng.randint(1, 3))]
            ids = list(dict.fromkeys(ids))
            same(lambda: model.delete(ids), lambda: obj.delete(*ids))
        elif r < 0.45:
            n = rng.randint(0, len(model.entries) + 1)
            same(lambda: model.trim_maxlen(n), lambda: obj.trim(maxlen=n))
        elif r < 0.47:
            m = self._some_id(rng, model)
            same(lambda: model.trim_minid(m), lambda: obj.trim(minid=m))
        elif r < 0.57:
            a, b = self._bound(rng, model, False), self._bound(rng, model, True)
            same(lambda: model.range(a, b, count), lambda: obj.range(a, b, count))
            same(lambda: model.range(a, b, count, True), lambda: obj.rev_range(a, b, count))
        elif r < 0.61:
            start = rng.choice(["$", "0"])
            same(lambda: model.create_group(group, start), lambda: obj.create_group(group, start),
                 exc_map={KeyError: AlreadyExistsError})
        elif r < 0.75:
            same(lambda: model.read_group(group, consumer, count, now),
                 lambda: obj.read_group(group, consumer, count))
        elif r < 0.79:
            same(lambda: model.read_pending(group, consumer, "0-0", count, now),
                 lambda: obj.read_group(group, consumer, count, id="0"))
        elif r < 0.87:
            if group in model.groups:
                pel = list(model.groups[group]["pel"].keys())
                ids = [fid(rng.choice(pel)) for _ in range(2)] if pel else ["1-1"]
                ids = list(dict.fromkeys(ids))
                same(lambda: model.ack(group, ids), lambda: obj.ack(group, *ids))
        elif r < 0.94:
            idle = rng.choice([0, 3, 10])
            same(lambda: model.claim(group, consumer, idle, now), lambda: obj.claim(group, consumer, idle))
        elif r < 0.95:
            same(lambda: model.destroy_group(group), lambda: obj.destroy_group(group))
        else:
            same(lambda: model.pending(group), lambda: obj.pending(group))


DRIVERS = {
    "value": ValueDriver, "array": ArrayDriver, "list": ListDriver, "queue": QueueDriver,
    "bounded_queue": BoundedQueueDriver,
    "stack": StackDriver, "linked_list": LinkedListDriver, "set": SetDriver,
    "sorted_set": SortedSetDriver, "dict": DictDriver, "sorted_dict": SortedDictDriver,
    "stream": StreamDriver,
}
