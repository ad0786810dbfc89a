"""The ``ppd`` sub-commands of ``measure``: ``ppd measure ...`` (``measure.py``, ``train.py``) and
``ppd run`` / ``ppd validate`` (``run.py``); shared options in ``common.py``. Handlers import
torch lazily so that ``ppd --help`` works with the core install alone."""
