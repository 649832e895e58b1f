"""Running episodes of a benchmark and summarizing them."""
