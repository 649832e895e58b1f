"""Tables and figures written atomically: a killed report never leaves a file that looks complete."""

from __future__ import annotations

import os

import pandas as pd

from esopt.io import atomic_path


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")


def save_figure(fig, path: str | os.PathLike, dpi: int = 150, tight: bool = True) -> None:
    """Write a matplotlib figure as PNG atomically and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png", **({"bbox_inches": "tight"} if tight else {}))
    plt.close(fig)
