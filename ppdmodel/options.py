"""Settings declared once: frozen dataclasses whose fields carry their default, help and check,
and from which every ``ppd`` option is derived.

A concern of a command (the model, the prompts, the methods, timing, output) is one frozen
dataclass deriving from ``Settings``, each field declared with ``option``: its default, its
help text and its argparse type (one of ``ppdmodel.cli_args``' checked types, or ``choices``).
``Settings.add_to(parser)`` adds the fields as one titled group of options, so ``--help`` is
grouped by concern; ``Settings.from_args(args)`` builds the value from the parsed options;
constructing one in Python checks every field by the same rules (a value given as text must
pass the option's type, so the CLI and the API refuse the same values), then ``check``'s rules
between fields. The value then travels whole; nothing re-checks it on the way.

Option names are the field names (``max_new_tokens`` is ``--max-new-tokens``), so the parsed
``argparse.Namespace`` keeps the attribute names it always had.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar

MANY = ("+", "*")
"""``nargs`` of an option that takes several values (its field holds a tuple)."""

FLAGS = ("store_true", "store_false")
"""Actions of an option that takes no value (its field holds a bool)."""


@dataclass(frozen=True)
class Option:
    """How one settings field appears on the command line (``option`` builds it)."""

    help: str
    type: Callable[[str], object] | None = None
    """argparse type: converts and checks the text of one value (None: free text)."""
    nargs: str | None = None
    choices: tuple | None = None
    metavar: str | None = None
    action: object | None = None
    """An argparse action: ``"store_true"``, ``"append"``, ``argparse.BooleanOptionalAction``."""
    required: bool = False
    exclusive: str | None = None
    """Fields of one class sharing this key form one mutually exclusive group (required when
    any of them is ``required``)."""

    def argparse_kwargs(self, default) -> dict:
        """Keyword arguments of ``add_argument``."""
        kw = {"help": self.help}
        for name in ("type", "nargs", "choices", "metavar", "action"):
            value = getattr(self, name)
            if value is not None:
                kw[name] = value
        if self.required and self.exclusive is None:
            kw["required"] = True
        elif not (self.action in FLAGS and default is False):
            kw["default"] = list(default) if isinstance(default, tuple) else default
        return kw

    @property
    def many(self) -> bool:
        """True when the option takes several values (``nargs`` + / * or ``append``)."""
        return self.nargs in MANY or self.action == "append"


def option(default=MISSING, *, help: str, **how) -> dataclasses.Field:
    """A settings field: its ``default`` (none: required; a list is kept as a tuple), its
    ``help`` and how it is given on the command line (``Option``'s fields)."""
    meta = {"option": Option(help=help, **how)}
    if isinstance(default, list):
        default = tuple(default)
    return field(default=default, metadata=meta)


_SAME = object()


def like(settings: type, name: str, default=_SAME, **how) -> dataclasses.Field:
    """Field ``name`` of ``settings`` declared again for another concern or command: the same
    type and check, with this ``default`` (none given: the same) and ``how`` (``Option``'s
    fields: its help, ``nargs``, ...). One concept keeps one declaration of its rules."""
    if not (isinstance(settings, type) and issubclass(settings, Settings)):
        raise ValueError(f"settings must be a Settings class, got {settings!r}")
    found = [f for f in settings.options() if isinstance(name, str) and f.name == name]
    if not found:
        raise ValueError(f"name must be an option field of {settings.__name__}, got {name!r}")
    opt = dataclasses.replace(found[0].metadata["option"], **how)
    if default is _SAME:
        default = found[0].default
    if isinstance(default, list):
        default = tuple(default)
    return field(default=default, metadata={"option": opt})


def flag_of(name: str) -> str:
    """The option string of field ``name`` (``max_new_tokens`` -> ``--max-new-tokens``)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a field name (a Python identifier), got {name!r}")
    return "--" + name.replace("_", "-")


def _checked_one(name: str, opt: Option, value):
    """One value checked (and converted) by the option's type and choices."""
    if opt.type is not None:
        text = value if isinstance(value, str) else str(value)
        if isinstance(value, bool):  # True is not the integer 1 here
            raise ValueError(f"{name} must not be True or False, got {value!r}")
        try:
            value = opt.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ValueError(f"{name}: {exc}") from None
    if opt.choices is not None and not _among(value, opt.choices):
        allowed = ", ".join(map(str, opt.choices))
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    if opt.type is None and opt.choices is None and not isinstance(value, str):
        raise ValueError(f"{name} must be text, got {value!r}")
    return value


def _among(value, choices) -> bool:
    """``value in choices``, False for a value that cannot be compared (a numpy array)."""
    try:
        return bool(value in choices)
    except (TypeError, ValueError):
        return False


def _checked(name: str, opt: Option, value, default):
    """``value`` of field ``name`` checked by its option's rules (a ValueError naming it)."""
    if value is None and (default is None or opt.exclusive is not None):
        return None
    if opt.action in FLAGS or opt.action is argparse.BooleanOptionalAction:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
        return value
    if opt.many:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ValueError(f"{name} must be a list of values, got {value!r}")
        values = tuple(_checked_one(name, opt, v) for v in value)
        if opt.nargs == "+" and not values and default not in ((), None):
            raise ValueError(f"{name} needs at least one value")
        return values
    return _checked_one(name, opt, value)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A frozen value of one concern, checked on construction (module docstring)."""

    GROUP: ClassVar[str] = "options"
    """The title of its group in ``--help``."""
    ABOUT: ClassVar[str | None] = None
    """The group's description in ``--help``."""

    def __post_init__(self) -> None:
        for f in self.options():
            value = _checked(f.name, f.metadata["option"], getattr(self, f.name), f.default)
            object.__setattr__(self, f.name, value)
        self._check_exclusive()
        self.check()

    def check(self) -> None:
        """Rules between fields: a ValueError naming them (none by default)."""

    def _check_exclusive(self) -> None:
        """At most one field of each ``exclusive`` group away from its default, as argparse
        allows one option of a mutually exclusive group (else one value is silently unused)."""
        groups: dict[str, list[str]] = {}
        for f in self.options():
            key = f.metadata["option"].exclusive
            value = getattr(self, f.name)
            if key is not None and value is not None and value != f.default:
                groups.setdefault(key, []).append(flag_of(f.name))
        for given in groups.values():
            if len(given) > 1:
                raise ValueError(f"give one of {', '.join(given)}, not both")

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        """The fields given on the command line."""
        return [f for f in fields(cls) if "option" in f.metadata]

    @classmethod
    def add_to(
        cls,
        parser: argparse.ArgumentParser,
        *,
        only: Iterable[str] | None = None,
        skip: Iterable[str] = (),
        changes: Mapping[str, Mapping] | None = None,
        title: str | None = None,
        about: str | None = None,
    ) -> argparse._ArgumentGroup:
        """Add the fields (``only`` those, less ``skip``) to ``parser`` as one titled group;
        ``changes`` alters a field's option for this command (``{"k": {"default": [1, 3]}}``:
        any ``Option`` field, or ``default``); ``about=""`` drops the class's description."""
        if not isinstance(parser, argparse.ArgumentParser | argparse._ArgumentGroup):
            raise ValueError(f"parser must be an argparse parser, got {parser!r}")
        for name, names in (("only", only or ()), ("skip", skip)):
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ValueError(f"{name} must be a list of field names, got {names!r}")
        if changes is not None and not (isinstance(changes, Mapping) and all(
                isinstance(c, Mapping) for c in changes.values())):  # fmt: skip
            raise ValueError(f"changes must map field names to option changes, got {changes!r}")
        changes = dict(changes or {})
        names = [f.name for f in cls.options()]
        unknown = sorted((set(only or ()) | set(skip) | set(changes)) - set(names))
        if unknown:
            raise ValueError(f"{cls.__name__} has no option field {unknown}")
        about = cls.ABOUT if about is None else about or None  # "": no description
        group = parser.add_argument_group(title or cls.GROUP, about)
        exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
        chosen = [f for f in cls.options() if (only is None or f.name in only)]
        for f in chosen:
            if f.name in skip:
                continue
            change = dict(changes.get(f.name, {}))
            default = change.pop("default", f.default)
            opt = dataclasses.replace(f.metadata["option"], **change)
            target = group
            if opt.exclusive is not None:
                if opt.exclusive not in exclusive:
                    required = any(
                        g.metadata["option"].exclusive == opt.exclusive
                        and g.metadata["option"].required
                        for g in chosen
                    )
                    exclusive[opt.exclusive] = group.add_mutually_exclusive_group(required=required)
                target = exclusive[opt.exclusive]
            kwargs = opt.argparse_kwargs(None if default is MISSING else default)
            target.add_argument(flag_of(f.name), **kwargs)
        return group

    @classmethod
    def from_args(cls, args: argparse.Namespace, **given):
        """The value from parsed options (a field the command does not offer keeps its
        default; ``given`` sets fields outright)."""
        values = {f.name: getattr(args, f.name) for f in cls.options() if hasattr(args, f.name)}
        values.update(given)
        return cls(**values)


def part(kind: type[Settings]) -> dataclasses.Field:
    """A ``Command`` field holding ``kind``'s value, every field at its default unless given."""
    if not (isinstance(kind, type) and issubclass(kind, Settings)):
        raise ValueError(f"kind must be a Settings class, got {kind!r}")
    return field(default_factory=kind)


@dataclass(frozen=True, kw_only=True)
class Command:
    """A command's settings: one ``Settings`` value per concern, each a field whose type is its
    class (``part(kind)`` defaults it). ``add_to`` adds every concern's options as its titled
    group (``CHANGES``: this command's ``changes`` per concern); ``from_args`` builds every
    value; ``check`` holds the rules between concerns (checked on construction)."""

    CHANGES: ClassVar[Mapping[str, Mapping[str, Mapping]]] = {}
    """Per concern, the ``Settings.add_to`` changes of this command's options."""

    def __post_init__(self) -> None:
        for name, kind in self.concerns().items():
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {value!r}")
        self.check()

    def check(self) -> None:
        """Rules between concerns: a ValueError naming them (none by default)."""

    @classmethod
    def concerns(cls) -> dict[str, type[Settings]]:
        """Each concern's field name and class."""
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    @classmethod
    def add_to(cls, parser: argparse.ArgumentParser) -> None:
        """Every concern's options, one titled group each."""
        for name, kind in cls.concerns().items():
            kind.add_to(parser, changes=cls.CHANGES.get(name))

    @classmethod
    def from_args(cls, args: argparse.Namespace, **given):
        """Every concern's value from the parsed options (``given`` sets concerns outright)."""
        values = {n: kind.from_args(args) for n, kind in cls.concerns().items() if n not in given}
        return cls(**values, **given)


__all__ = ["Command", "Option", "Settings", "flag_of", "like", "option", "part"]
