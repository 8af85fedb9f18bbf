from __future__ import annotations

import copy
import enum
import json
import pickle
from collections import OrderedDict
from typing import Any

import pytest

import dsh
from dsh.json_snapshot import MAX_DEPTH, FrozenDict, FrozenList, freeze, thaw


class Color(enum.IntEnum):
    RED = 1


def test_copy_is_deep_lossless_and_equal_to_plain_json() -> None:
    src: dict[str, Any] = {"a": [1, 2.5, "x", None, True, {"b": []}], "c": {}}
    frozen = freeze(src)
    assert frozen == src and json.dumps(frozen) == json.dumps(src)
    src["a"][5]["b"].append(1)  # the caller's object is copied, not kept
    assert frozen["a"][5]["b"] == []
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["a"], FrozenList)


def test_bool_and_int_stay_distinct() -> None:
    frozen = freeze({"t": True, "one": 1, "zero": 0, "f": False})
    assert [type(frozen[k]) for k in ("t", "one", "zero", "f")] == [bool, int, int, bool]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("x", 1),
        lambda d: d.__delitem__("a"),
        lambda d: d.update(x=1),
        lambda d: d.pop("a"),
        lambda d: d.popitem(),
        lambda d: d.setdefault("x", 1),
        lambda d: d.clear(),
        lambda d: d["a"].append(1),
        lambda d: d["a"].__setitem__(0, 9),
        lambda d: d["a"].extend([1]),
        lambda d: d["a"].insert(0, 1),
        lambda d: d["a"].pop(),
        lambda d: d["a"].sort(),
        lambda d: d["a"].reverse(),
        lambda d: d["a"].remove(1),
        lambda d: d["a"].clear(),
        lambda d: d["a"].__delitem__(0),
    ],
)
def test_mutation_raises(mutate: Any) -> None:
    frozen = freeze({"a": [1, 2]})
    with pytest.raises(TypeError):
        mutate(frozen)
    assert frozen == {"a": [1, 2]}


def test_in_place_operators_raise() -> None:
    frozen = freeze({"a": [1]})
    lst = frozen["a"]
    with pytest.raises(TypeError):
        lst += [2]
    with pytest.raises(TypeError):
        frozen |= {"b": 1}
    assert frozen == {"a": [1]}


def test_frozen_values_are_shared_and_survive_copy_and_pickle() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    assert freeze(frozen) is frozen
    assert freeze({"again": frozen})["again"] is frozen
    assert copy.copy(frozen) is frozen and copy.deepcopy(frozen) is frozen
    back = pickle.loads(pickle.dumps(frozen))
    assert back == frozen and isinstance(back, FrozenDict)


def test_thaw_gives_plain_mutable_copy() -> None:
    plain = thaw(freeze({"a": [1, {"b": 2}]}))
    assert type(plain) is dict and type(plain["a"]) is list and type(plain["a"][1]) is dict
    plain["a"].append(3)


def test_json_shaped_mappings_and_sequences_are_accepted() -> None:
    frozen = freeze(OrderedDict(a=(1, 2), b=Color.RED))
    assert frozen == {"a": [1, 2], "b": 1} and type(frozen["b"]) is int


class Box:
    pass


def _cycle() -> dict[str, Any]:
    d: dict[str, Any] = {"a": 1}
    d["self"] = d
    return d


def _deep(n: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(n):
        node["n"] = {}
        node = node["n"]
    return root


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ({"x": float("nan")}, "JSON_NOT_FINITE"),
        ({"x": float("inf")}, "JSON_NOT_FINITE"),
        ({"x": [1, float("-inf")]}, "JSON_NOT_FINITE"),
        ({1: "int key"}, "JSON_KEY_NOT_STRING"),
        ({("t",): "tuple key"}, "JSON_KEY_NOT_STRING"),
        ({"x": {1, 2}}, "JSON_UNSUPPORTED_TYPE"),
        ({"x": b"bytes"}, "JSON_UNSUPPORTED_TYPE"),
        ({"x": Box()}, "JSON_UNSUPPORTED_TYPE"),
        ({"x": lambda: 1}, "JSON_UNSUPPORTED_TYPE"),
        ({"x": 1j}, "JSON_UNSUPPORTED_TYPE"),
        (_cycle(), "JSON_CYCLE"),
        (_deep(MAX_DEPTH + 5), "JSON_TOO_DEEP"),
    ],
)
def test_non_json_is_rejected_with_a_code(value: Any, code: str) -> None:
    with pytest.raises(dsh.ValidationError) as info:
        freeze(value)
    assert info.value.code == code


def test_error_names_the_path() -> None:
    with pytest.raises(dsh.ValidationError, match=r"data\.a\[1\]\.b"):
        freeze({"a": [0, {"b": float("nan")}]})


def test_hostile_depth_far_past_the_recursion_limit() -> None:
    with pytest.raises(dsh.ValidationError) as info:
        freeze({"a": [_deep(50_000)]})
    assert info.value.code == "JSON_TOO_DEEP"


def test_cycle_below_the_depth_limit_is_named() -> None:
    deep = _deep(MAX_DEPTH + 10)
    node = deep
    while node["n"]:
        node = node["n"]
    node["loop"] = deep
    with pytest.raises(dsh.ValidationError) as info:
        freeze(deep)
    assert info.value.code == "JSON_CYCLE"


def test_shared_subvalues_are_not_cycles() -> None:
    shared = [1, 2]
    assert freeze({"a": shared, "b": shared}) == {"a": [1, 2], "b": [1, 2]}


def test_depth_just_under_the_limit_is_fine() -> None:
    assert freeze(_deep(MAX_DEPTH - 2))


def _lists(value: Any, n: int) -> Any:
    for _ in range(n):
        value = [value]
    return value


def test_shared_frozen_values_count_toward_the_depth_limit() -> None:
    # Data taken from another event is shared, not copied, and must not carry the nesting past
    # the limit: wrapped again and again it once reached ~1,320 levels, which to_json and the
    # codec could no longer handle.
    s = dsh.Session.create("s")
    e = s.append("x/deep", _lists({"leaf": 1}, 119), ignorable=True)  # 120 levels
    with pytest.raises(dsh.ValidationError) as info:
        s.append("x/deep", _lists(e.data, 120), ignorable=True)
    assert info.value.code == "JSON_TOO_DEEP" and len(s) == 1
    with pytest.raises(dsh.ValidationError) as info:
        s.append("x/deep", {"a": [1, {"b": _lists(e.data, 8)}]}, ignorable=True)  # 131
    assert info.value.code == "JSON_TOO_DEEP" and len(s) == 1
    # The deepest that fits is accepted, and sharing still shares.
    ok = s.append("x/deep", _lists(e.data, 8), ignorable=True)  # 128 levels
    assert ok.data[0][0][0][0][0][0][0][0] is e.data
    assert ok.to_json()["data"] == _lists(e.to_json()["data"], 8)
    with pytest.raises(dsh.ValidationError) as info:
        freeze([ok.data])
    assert info.value.code == "JSON_TOO_DEEP"
