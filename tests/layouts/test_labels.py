"""Layout labels: what the less obvious parts mean, said for those present."""

from __future__ import annotations

from surrogate.layouts.labels import label_legend, label_of


def test_the_legend_says_what_each_part_present_means() -> None:
    labels = [
        label_of(16, 1, 1, 1, 1, 1, 1, 4, 2, "full", 8, False),
        label_of(4, 2, 2, 1, 1, 3, 2, 8, 2, "none", 0, True),
        label_of(32, 1, 1, 1, 1, 1, 1, 8, 3, "selective", 0, False, dp_replicate=4),
        label_of(8, 1, 1, 1, 1, 1, 1, 8, 3, "full", 0, False),
    ]
    assert labels[0] == "dp16 tp1 pp1 mbs1 ga4 z2 rc-full-k8"
    assert label_legend(labels).split("; ") == [
        "hsdpN: N copies of ZeRO's shards (hybrid sharding)",
        "rc-full: full recomputation of every layer",
        "rc-full-k8: full recomputation of 8 layers of each pipeline stage",
        "rc-selective: selective recomputation (part of each layer)",
        "sp: sequence parallelism",
        "vppN: N virtual pipeline stages per rank (interleaved)",
    ]


def test_plain_layouts_need_no_legend() -> None:
    assert label_legend([label_of(8, 4, 1, 2, 1, 1, 2, 16, 1, "none", 0, False)]) == ""
    assert label_legend([]) == ""
