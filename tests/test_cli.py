"""The example scripts' command line: shared helpers in examples/cli.py, and invalid input ending in one line."""

import inspect

from modeling_pointer_sentinel import evaluation, plotting, training


def test_package_modules_hold_no_cli_or_plotting_code():
    """training.py holds data streams, the segment schedule and optimiser helpers; evaluation.py holds measures.
    Command-line helpers live in examples/cli.py, pictures in plotting.py (old imports of the pictures still work)."""
    assert "argparse" not in inspect.getsource(training) and not hasattr(training, "add_data_arguments")
    assert "matplotlib" not in inspect.getsource(evaluation) and "def plot" not in inspect.getsource(evaluation)
    for name in ("plot_gate_histogram", "plot_bucket_differences", "pointer_window_picture"):
        assert getattr(evaluation, name) is getattr(plotting, name)
