"""docs/two-hours.json is the one source of the two-hours table and figure (royalefleet.two_hours)."""

import json

import pytest

from royalefleet import two_hours


def test_the_doc_table_is_the_data_table():
    assert two_hours.main(["--check"]) == 0


def test_cells_carry_the_wilson_interval_of_the_score():
    # 75 of 200: Wilson 95 % is [0.3110, 0.4438] (p=0.375, z=1.96, worked by hand)
    cell = two_hours._cell(two_hours.Result(0.375, 200))
    assert cell == "0.375 [0.311, 0.444] (200)"
    assert two_hours._cell(None) == "not measured"


def test_load_refuses_points_out_of_order_and_bad_scores(tmp_path):
    p = tmp_path / "d.json"
    p.write_text(json.dumps([{"name": "r", "note": "", "points": [{"hours": 1.0, "player": "a"},
                                                                  {"hours": 0.5, "player": "b"}]}]))
    with pytest.raises(ValueError, match=r"'r': points must be in wall-time order, got hours \[1.0, 0.5\]"):
        two_hours.load(p)
    p.write_text(json.dumps([{"name": "r", "note": "", "points": [
        {"hours": 0, "player": "a", "unsearched": {"score": 1.5, "games": 200}}]}]))
    with pytest.raises(ValueError, match=r"'r' a: score 1.5 over 200 games"):
        two_hours.load(p)
    p.write_text(json.dumps([{"name": "r", "note": "", "points": [{"hours": 0, "player": "a", "typo": 1}]}]))
    with pytest.raises(Exception, match="typo"):
        two_hours.load(p)


def test_the_figure_renders_every_series(tmp_path):
    series = two_hours.load()
    fig = two_hours.figure(series)
    out = tmp_path / "f.png"
    fig.savefig(out, dpi=50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert {lab.split(",")[0] for lab in labels} == {s.name for s in series}
