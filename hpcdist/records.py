"""hpcdist's records: classes of typed fields as `dataclasses` makes them, built without compiling code (a leaf).

`dataclasses` compiles four to six methods for each class when the class is defined, and imports `inspect`: a rank
loads about forty records, and spent about 20 ms of its own start-up on them, the largest part of what it cost
beyond a plain MPI rank (docs/measurements/rank-cost.md). A `record` has the same
`__init__`, `__repr__`, `__eq__`, and for a frozen one `__hash__` and no assignment to its fields: methods shared
by every record, which read the class's fields. Type checkers see a record as a dataclass (PEP 681).
`fields`, `replace` and `asdict` work on records as `dataclasses`' functions work on dataclasses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:  # typing has it from Python 3.11 only, and typing_extensions imports inspect
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: object) -> Callable[[_T], _T]:
        """What type checkers read (PEP 681); nothing at run time."""
        return lambda function: function


__all__ = ["Field", "FrozenError", "asdict", "field", "fields", "record", "replace"]

_T = TypeVar("_T")
_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()
_FIELDS = "__record_fields__"
_INIT = "__record_init__"  # the class's fields that __init__ takes by position, those only by keyword, __post_init__'s
_SET = object.__setattr__


class FrozenError(AttributeError):
    """An assignment to a field of a frozen record (dataclasses' FrozenInstanceError)."""


class Field:
    """One field of a record: its name, and its default or the function that makes it."""

    __slots__ = ("compare", "default", "default_factory", "kw_only", "name", "repr")

    def __init__(
        self,
        default: Any = _MISSING,
        default_factory: Any = _MISSING,
        repr: bool = True,  # noqa: A002
        compare: bool = True,
    ) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.compare = compare
        self.kw_only = False

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] = _MISSING,
    repr: bool = True,  # noqa: A002
    compare: bool = True,
) -> Any:
    """A field's default, or the function that makes a fresh one for each record; whether the record's repr shows
    it, and whether equality and the hash count it: as dataclasses.field takes them."""
    return Field(default, default_factory, repr, compare)


@overload
def record(cls: type[_T], /) -> type[_T]: ...
@overload
def record(
    *, frozen: bool = False, kw_only: bool = False, eq: bool = True, slots: bool = False
) -> Callable[[type[_T]], type[_T]]: ...
@dataclass_transform(field_specifiers=(field, Field))
def record(
    cls: type[_T] | None = None, /, *, frozen: bool = False, kw_only: bool = False, eq: bool = True, slots: bool = False
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """Class decorator: make `cls` a record of its annotated fields, as dataclasses.dataclass does with its options."""

    def make(cls: type[_T]) -> type[_T]:
        return _make(cls, frozen, kw_only, eq, slots)

    return make if cls is None else make(cls)


def fields(of: Any) -> tuple[Field, ...]:
    """A record's fields (of the record or its class), in their order."""
    return tuple(getattr(of, _FIELDS).values())


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of the record `obj` with the fields named in `changes` changed."""
    values = {spec.name: getattr(obj, spec.name) for spec in fields(obj)}
    return type(obj)(**{**values, **changes})


def asdict(obj: Any) -> Any:
    """A record as a dict of its fields, the records, lists, tuples and dicts in them converted alike."""
    if hasattr(type(obj), _FIELDS):
        return {spec.name: asdict(getattr(obj, spec.name)) for spec in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return type(obj)(asdict(item) for item in obj)
    if isinstance(obj, dict):
        return {asdict(key): asdict(value) for key, value in obj.items()}
    return obj


def _make(cls: type[_T], frozen: bool, kw_only: bool, eq: bool, slots: bool) -> type[_T]:
    """`cls` as a record (a new class when it has slots, else `cls` itself)."""
    specs: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        specs.update(base.__dict__.get(_FIELDS, {}))
    for name, kind in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 - inspect is what this avoids
        if _classvar(kind):
            continue
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, Field) else Field(value)
        spec.name, spec.kw_only = name, kw_only
        specs[name] = spec
        if spec.default is _MISSING or slots:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, spec.default)
    if slots:
        body = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
        body["__slots__"] = tuple(
            name for name in specs if not any(name in getattr(b, "__slots__", ()) for b in cls.__mro__[1:])
        )
        meta: Any = type(cls)  # its metaclass
        cls = meta(cls.__name__, cls.__bases__, body)
    setattr(cls, _FIELDS, specs)
    positional = tuple(spec for spec in specs.values() if not spec.kw_only)
    keyword = tuple(spec for spec in specs.values() if spec.kw_only)
    setattr(cls, _INIT, (positional, keyword, hasattr(cls, "__post_init__")))
    own = cls.__dict__
    methods = {
        "__init__": _init,
        "__repr__": _repr,
        **({"__eq__": _eq} if eq else {}),
        **({"__setattr__": _refuse, "__delattr__": _refuse} if frozen else {}),
    }
    for name, method in methods.items():
        if name not in own or name in ("__setattr__", "__delattr__"):  # a frozen record: always
            setattr(cls, name, method)
    if eq and own.get("__hash__") is None:
        setattr(cls, "__hash__", _hash if frozen else None)  # noqa: B010 - as a dataclass's: unhashable unless frozen
    return cls


def _classvar(kind: object) -> bool:
    """Whether an annotation (a string, with `from __future__ import annotations`) is a ClassVar's."""
    text = kind if isinstance(kind, str) else repr(kind)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """Every record's `__init__`: its fields as parameters, as a dataclass's `__init__` takes them (the keyword-only
    ones after the others), a default factory called for each record; then `__post_init__` when the class has one.

    Shared, not compiled per class: 1.2 µs for a record of six fields against a compiled one's 0.7 µs, and no
    record is made on a path where that counts (the ledger makes its calls' records without `__init__`)."""
    positional, keyword, post = getattr(type(self), _INIT)
    if len(args) > len(positional):
        raise TypeError(f"{_name(self)} takes {len(positional)} positional arguments but {len(args)} were given")
    for spec, value in zip(positional, args, strict=False):  # the others, below, by keyword or by default
        if spec.name in kwargs:
            raise TypeError(f"{_name(self)} got multiple values for argument {spec.name!r}")
        _SET(self, spec.name, value)
    for spec in (*positional[len(args) :], *keyword):
        name = spec.name
        if name in kwargs:
            value = kwargs.pop(name)
        elif spec.default is not _MISSING:
            value = spec.default
        elif spec.default_factory is not _MISSING:
            value = spec.default_factory()
        else:
            kind = "keyword-only" if spec.kw_only else "positional"
            raise TypeError(f"{_name(self)} missing 1 required {kind} argument: {name!r}")
        _SET(self, name, value)
    if kwargs:
        raise TypeError(f"{_name(self)} got an unexpected keyword argument {next(iter(kwargs))!r}")
    if post:
        self.__post_init__()


def _name(self: Any) -> str:
    """'Failed.__init__()', as Python names a function in its errors."""
    return f"{type(self).__qualname__}.__init__()"


def _repr(self: Any) -> str:
    """'Name(field=value, ...)', as a dataclass shows itself."""
    shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in fields(self) if spec.repr)
    return f"{type(self).__qualname__}({shown})"


def _values(self: Any) -> tuple[Any, ...]:
    """The values of the record's fields that equality counts, in order."""
    return tuple(getattr(self, spec.name) for spec in getattr(type(self), _FIELDS).values() if spec.compare)


def _eq(self: Any, other: object) -> bool:
    """Equal to a record of the same class with equal fields."""
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    """The hash of the fields' values."""
    return hash(_values(self))


def _refuse(self: Any, name: str, *value: Any) -> None:
    """A frozen record's fields are never assigned nor deleted."""
    raise FrozenError(f"cannot assign to field {name!r}")
