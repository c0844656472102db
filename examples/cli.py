"""Command-line helpers shared by the example scripts (train.py, evaluate.py, generate.py)."""


def add_data_arguments(parser):
    """The data flags shared by examples/train.py and examples/evaluate.py."""
    a = parser.add_argument
    a("--dataset_name", help="a Hugging Face datasets name, e.g. wikitext (default: the bundled WikiText-2)")
    a("--dataset_config_name", help="e.g. wikitext-2-v1")
    a("--train_file", help="local plain text, one line per sentence or paragraph")
    a("--validation_file")
    a("--test_file")
