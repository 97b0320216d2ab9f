"""The start-up device-memory judgement (services/learner/vram.py) on numbers worked out by
hand; the measuring trial itself needs CUDA (tests/test_gpu.py)."""

from services.learner.vram import VRAM_HEADROOM_MB, fit_report


def test_an_update_that_fits():
    r = fit_report(trial_peak_mb=600.0, weights_mb=100.0, rows_mb=500.0, available_mb=4000.0, minibatch_size=256)
    assert r.need_mb == 600 + 500 + VRAM_HEADROOM_MB == 1356 and r.fits


def test_an_update_that_does_not_fit_names_a_minibatch_that_would():
    # per row (900 - 100) / 256 = 3.125 MiB; budget 1500 - 100 - 500 - 256 = 644 MiB -> 206 rows -> 128
    r = fit_report(trial_peak_mb=900.0, weights_mb=100.0, rows_mb=500.0, available_mb=1500.0, minibatch_size=256)
    assert (r.need_mb, r.fits, r.suggested_minibatch) == (1656.0, False, 128)
    assert r.describe() == ("the update needs 1,656 MiB (forward+backward of 256 rows 900 + the iteration's packed "
                            "rows 500 + headroom 256) of 1,500 MiB available")


def test_no_minibatch_is_suggested_when_not_one_row_fits():
    r = fit_report(trial_peak_mb=900.0, weights_mb=100.0, rows_mb=1500.0, available_mb=1500.0, minibatch_size=256)
    assert (r.fits, r.suggested_minibatch) == (False, None)

