"""The job's side of gpufeed: what runs inside the user's Python, stdlib only, never importing
torch itself (it hooks torch when the job imports it).

gpufeed writes this package into a private folder put first on the job's ``PYTHONPATH`` as
``_gpufeed_hook/`` (its modules import each other relatively, so the name does not matter),
beside ``sitecustomize.py`` which starts it; ``gpufeed.profile()`` installs the step timing in
its own process from ``gpufeed._hook``. One module a job:

- ``imports``: the one import hook (runs a callback once a watched module is imported);
- ``overrides``: the one ``DataLoader.__init__`` patch (``--dataloader`` values within PyTorch's
  rules, the loader's file:line) and the ``--torch`` switches;
- ``steps``: step markers from the DataLoader iterator and the optimizer's steps;
- ``pipeline``: loader set-ups that load every sample more than once, said as notes;
- ``site``: the start-up in the job (config, report lines, the hooks above);
- ``sitecustomize``: the file the job's Python runs, which starts ``site`` and hands over to the
  ``sitecustomize`` it shadows.
"""
