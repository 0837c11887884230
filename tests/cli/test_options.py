"""The list flags of `search`, `propose` and `heatmap`, read by one parser
(:func:`surrogate.cli.options.list_items`): each value once, no empty item."""

from __future__ import annotations

import json

import pytest

from surrogate.cli import main
from surrogate.cli.options import floats, ints, list_items, names, parse_nodes
from surrogate.errors import ConfigError

SMALL = [
    "--model",
    "1.34b",
    "--global-batch-seqs",
    "16",
    "--max-cp",
    "1",
    "--max-vpp",
    "1",
    "--max-mbs",
    "2",
    "--trials",
    "0",
    "--json",
    "--top-k",
    "1",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("torchtitan,torchtitan", ("torchtitan",)),
        (" torchtitan , megatron,torchtitan ", ("torchtitan", "megatron")),
        ("megatron,nanotron,megatron,nanotron", ("megatron", "nanotron")),
        ("a", ("a",)),
    ],
)
def test_items_each_once_in_the_order_given(text: str, expected: tuple[str, ...]) -> None:
    assert list_items(text, "--x") == expected
    assert names(text, "--x") == expected


@pytest.mark.parametrize("text", ["", ",", " , ", "a,,b", "a,", ",a", "a, ,b"])
def test_an_empty_list_or_item_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--framework"):
        list_items(text, "--framework")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4", (4,)),
        ("3,1", (1, 3)),
        ("2,2,2", (2,)),
        ("1-8", (1, 2, 4, 8)),
        ("1-3", (1, 2, 3)),
        ("1-4,2", (1, 2, 4)),
        ("1-4,2-8", (1, 2, 4, 8)),
        ("1-4, 6", (1, 2, 4, 6)),
        ("8,1-2,8", (1, 2, 8)),
        (" 2 - 4 ", (2, 4)),
        ("5-5", (5,)),
    ],
)
def test_nodes_items_combine_each_count_once(text: str, expected: tuple[int, ...]) -> None:
    assert parse_nodes(text) == expected


@pytest.mark.parametrize("text", ["a-b", "4-1", "1-", "-1", "1-2-3", "1,,2", "1.5", "", "x"])
def test_bad_nodes_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--nodes"):
        parse_nodes(text)


def test_numbers_each_once() -> None:
    assert ints("1,1,0", "--zero") == (1, 0)
    assert ints(None, "--zero") is None
    assert floats("1,1.0,0.5", "--recompute-shares") == (1.0, 0.5)
    for bad in ("nan,1", "inf", "1,-inf"):
        with pytest.raises(ConfigError, match="finite"):
            floats(bad, "--recompute-shares")
    with pytest.raises(ConfigError, match="--zero"):
        ints("1,,2", "--zero")


@pytest.mark.parametrize(
    "flags",
    [
        ["--framework", "torchtitan,torchtitan"],
        ["--framework", "torchtitan, TorchTitan"],
        ["--framework", "megatron,torchtitan,megatron"],
        ["--zero", "2,2"],
        ["--recompute", "none,none"],
        ["--shardings", "full,full,node"],
        ["--recompute-shares", "1,1,0.5"],
        ["--nodes", "1-2,1"],
    ],
)
def test_search_takes_a_value_named_twice_as_once(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--nodes", "1", *SMALL] if "--nodes" not in flags else SMALL
    assert main(["search", *base, *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["space"]["enumerated_valid"] > 0


@pytest.mark.parametrize(
    "flags", [["--framework", "torchtitan,,megatron"], ["--zero", "1,"], ["--nodes", ","]]
)
def test_search_refuses_an_empty_item_in_one_line(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--nodes", "1", *SMALL] if "--nodes" not in flags else SMALL
    assert main(["search", *base, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and flags[0] in err and "Traceback" not in err
