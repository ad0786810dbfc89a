"""Real PPD decoding (paper Algorithm 2), token-for-token equal to greedy (or sampled) decoding.

- ``loop.py``: the main process's loop (``run_main``), shared by every backend;
- ``executor.py``: the ``CandidateExecutor`` protocol the loop drives;
- ``local.py``: the in-process executor and the ``single`` backend;
- ``dist.py`` / ``comm.py`` / ``launch.py`` / ``rank_group.py``: the torch.distributed
  message protocol, its point-to-point messages, what each rank runs, and the group of ranks
  spawned once that runs any number of tasks;
- ``backends.py``: ``ppd_generate`` / ``ppd_many``, the one dispatch over backends;
- ``greedy.py``: the greedy reference; ``results.py``: results (argument checks and the clock
  are on the ground floor: ``measure.checks``, ``measure.clock``);
- ``sampling.py``: main's token rule, greedy or sampled as transformers' ``generate`` samples
  (paper Appendix B);
- ``hf_generate.py``: PPD as ``model.generate(custom_generate=ppd_generate_hf)``, and the
  ``custom_generate/`` folder that loads it by path.
"""
