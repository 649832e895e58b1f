"""Building the tiny model and tokenizer, fetching hub models, loading either."""

from esopt.models.load import load_model_and_tokenizer

__all__ = ["load_model_and_tokenizer"]
