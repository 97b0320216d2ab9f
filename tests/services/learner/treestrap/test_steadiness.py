"""The steadiness figure read from a run's rows: each iteration's three numbers and their means,
and a clear refusal for a folder that is not a treestrap run."""

from __future__ import annotations

import json

from services.learner.treestrap.steadiness import figures, main


def test_the_figure_reads_each_rows_keys_and_means_the_last_iterations(tmp_path, capsys):
    rows = [{"run/iteration": 1, "ppo/policy_loss": 1.0},
            {"run/iteration": 2, "treestrap/head_disagreement": 0.75, "treestrap/target_stability": 0.5,
             "treestrap/search_agreement": 0.25},
            {"run/iteration": 3, "treestrap/head_disagreement": 0.25, "treestrap/target_stability": 1.0,
             "treestrap/search_agreement": 0.5}]
    assert figures(rows) == [(2, 0.25, 0.5, 0.25), (3, 0.75, 1.0, 0.5)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(tmp_path), "--last", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "last 2: single 0.500, ensemble 0.750, search 0.375"


def test_a_run_without_the_keys_is_refused_by_name(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "metrics.jsonl does not exist: give a run's folder" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"run/iteration": 1}) + "\n")
    assert main([str(tmp_path)]) == 2
    assert "is it a treestrap run?" in capsys.readouterr().err


def test_words_other_than_a_folder_and_last_n_are_refused_with_the_usage(capsys):
    for argv in ([], ["a", "b"], ["--last", "3"], ["run", "--last", "0"], ["run", "--first", "2"]):
        assert main(argv) == 2
        assert "usage: python -m services.learner.treestrap.steadiness RUN_DIR [--last N]" in capsys.readouterr().err
