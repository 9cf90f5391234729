"""``from whestboard.datasets import open_dataset``: the public way in, kept from the first release.

The implementation lives in :mod:`whestboard.data`; this module only names it.
"""

from whestboard.data import Dataset, DatasetError, DatasetInfo, MLPDamaged, MLPNotFound, open_dataset

__all__ = ["Dataset", "DatasetError", "DatasetInfo", "MLPDamaged", "MLPNotFound", "open_dataset"]
