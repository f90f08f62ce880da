"""hpcdist's records behave as dataclasses do, and a rank's start loads neither `dataclasses` nor `inspect`."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import ClassVar

import pytest

from hpcdist.records import FrozenError, asdict, field, fields, record, replace


@record(frozen=True)
class Base:
    kind: ClassVar[str] = "base"
    rank: int


@record(frozen=True)
class Told(Base):
    kind: ClassVar[str] = "told"
    how: str = ""
    ranks: tuple[int, ...] = ()
    note: str = field(default="", compare=False, repr=False)


@record
class Box:
    items: list[int] = field(default_factory=list)
    made: int = 0

    def __post_init__(self) -> None:
        self.made += 1


@record(slots=True)
class Slotted:
    name: str
    count: int = 0


@record(frozen=True, kw_only=True)
class Named:
    first: int
    second: int = 2


@record(frozen=True)
class Nested:
    inner: Told
    many: list[Told]


def test_fields_in_order_with_the_base_first_and_class_variables_left_out() -> None:
    assert [spec.name for spec in fields(Told)] == ["rank", "how", "ranks", "note"]
    assert [spec.name for spec in fields(Told(1))] == ["rank", "how", "ranks", "note"]
    assert (Told.kind, Told(1).kind, Base.kind) == ("told", "told", "base")


def test_init_takes_positional_and_keyword_arguments_with_defaults() -> None:
    told = Told(3, "exit code 1", ranks=(1, 2))
    assert (told.rank, told.how, told.ranks, told.note) == (3, "exit code 1", (1, 2), "")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'rank'"):
        Told()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Told(1, nope=2)  # type: ignore[call-arg]
    assert Named(first=1) == Named(first=1, second=2)
    with pytest.raises(TypeError, match="positional"):
        Named(1)  # type: ignore[call-arg]


def test_a_default_factory_makes_a_fresh_value_and_post_init_runs() -> None:
    one, two = Box(), Box()
    one.items.append(1)
    assert (one.items, two.items, one.made) == ([1], [], 1)


def test_equality_and_hash_as_a_dataclass_has_them() -> None:
    assert Told(1, "a") == Told(1, "a", note="not compared")
    assert Told(1, "a") != Told(1, "b")
    assert Told(1) != Base(1)  # another class, though the same fields
    assert hash(Told(1, "a")) == hash(Told(1, "a", note="x"))
    assert len({Told(1), Told(1), Told(2)}) == 2
    assert Box.__hash__ is None  # not frozen: unhashable, as a dataclass
    with pytest.raises(TypeError, match="unhashable"):
        hash(Box())


def test_a_frozen_record_refuses_assignment() -> None:
    told = Told(1)
    with pytest.raises(FrozenError, match="cannot assign to field 'rank'"):
        told.rank = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del told.how
    box = Box()
    box.made = 5
    assert box.made == 5


def test_repr_shows_the_fields_but_those_left_out() -> None:
    assert repr(Told(1, "x")) == "Told(rank=1, how='x', ranks=())"
    assert repr(Slotted("a")) == "Slotted(name='a', count=0)"


def test_slots() -> None:
    made = Slotted("a")
    made.count = 3
    assert Slotted.__slots__ == ("name", "count")
    assert not hasattr(made, "__dict__")
    with pytest.raises(AttributeError):
        made.other = 1  # type: ignore[attr-defined]


def test_replace_asdict_and_pickle() -> None:
    told = Told(1, "a", ranks=(2,))
    assert replace(told, how="b") == Told(1, "b", ranks=(2,))
    with pytest.raises(TypeError):
        replace(told, nope=1)
    nested = Nested(told, [Told(2)])
    assert asdict(nested) == {
        "inner": {"rank": 1, "how": "a", "ranks": (2,), "note": ""},
        "many": [{"rank": 2, "how": "", "ranks": (), "note": ""}],
    }
    assert pickle.loads(pickle.dumps(nested)) == nested


def test_every_record_shares_one_init_and_checks_its_arguments_as_python_does() -> None:
    assert Told.__init__ is Box.__init__ is Slotted.__init__  # nothing compiled per class
    with pytest.raises(TypeError, match=r"Told.__init__\(\) got multiple values for argument 'rank'"):
        Told(1, rank=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"Told.__init__\(\) takes 4 positional arguments but 5 were given"):
        Told(1, "a", (), "b", "c")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'first'"):
        Named()  # type: ignore[call-arg]


def test_a_rank_start_loads_neither_dataclasses_nor_inspect() -> None:
    code = "import sys, hpcdist.worker; print(sorted({'dataclasses', 'inspect', 'pkgutil'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
