"""A group of ``dist`` ranks spawned once that runs any number of PPD tasks on demand.

``ppd validate`` times every configuration in every round; spawning the ranks (and loading the
model on each) once per run cost more than many of the runs. A ``RankGroup`` spawns its
``world_size`` ranks once (``measure.lifeline.TiedRanks``: tied to this process, watched), each
loads the model once (``measure.decode.launch.RankState``), and ``run`` decodes prompts with any
d_bar, k, early head placement, trained head and decoding rule, returning the same
``PPDResult``s as a one-shot run. A task with k candidates runs on the first min(world_size,
k + 1) ranks, so one group of the largest size any configuration uses serves them all: the
model is loaded once per rank rather than once per rank of every size, and the ranks a task
leaves out wait on their request queue, computing nothing. Each task is watched as one run
(``timeout_s`` without progress; ``startup_s`` more when the group starts); a rank that raises,
dies or hangs gets every rank killed and ``DistRunError`` naming it, and the group then refuses
further tasks. The model a group saves for its ranks lives in a ``tied_temp_dir``, removed even
if this process is killed.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path

from transformers import AutoConfig

from measure.checks import (
    as_prompt_ids,
    check_context,
    check_head_layer,
    check_ppd_args,
    check_prompt_ids,
    eos_set,
)
from measure.decode.dist import DistJob, DistTask, free_port
from measure.decode.settings import PPDRequest
from measure.hf.lens import LogitLens, resolve_head
from measure.hf.loading import resolve_model_dir
from measure.lifeline import TiedRanks, tied_temp_dir
from ppdmodel.costs import check_early_head

GROUP_ENTRY = "measure.decode.launch:_group_entry"
"""What a spawned rank runs once ``measure.lifeline`` has tied it to this process."""
WHAT = "PPD dist run"
"""How errors name a group's runs."""
RANK_CALLS = frozenset({"measure.profile.ranks:pair_rounds_on_rank"})
"""The functions ``RankGroup.call`` may have its ranks run (by name: nothing else is called)."""


def check_rank_call(target) -> None:
    """ValueError unless ``target`` is one of ``RANK_CALLS``."""
    if target not in RANK_CALLS:
        raise ValueError(f"call: one of {sorted(RANK_CALLS)}, got {target!r:.80}")


def check_world_size(world_size, k) -> None:
    """ValueError unless 2 <= world_size <= k + 1 (main and at most one rank per candidate)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size must be an integer >= 2, got {world_size!r}")
    if world_size > k + 1:
        raise ValueError(f"world_size must be in [2, k + 1 = {k + 1}], got {world_size}")


def check_task(model, prompts, request: PPDRequest, config=None) -> list[list[int]]:
    """Refuse a bad ``request`` on ``prompts`` before any rank works on it; the prompts as
    token-id lists.

    ``config``: ``model``'s text config, if already read (else it is read here).
    """
    check_early_head(request.early_head)
    config = config or _config(model)
    d_bar, head, max_new_tokens = request.d_bar, request.head, request.max_new_tokens
    check_ppd_args(config.num_hidden_layers, d_bar, request.k, config.vocab_size, max_new_tokens)
    check_head_layer(head, d_bar)
    if head is not None and not isinstance(head, LogitLens) and not hasattr(head, "save"):
        raise ValueError(
            "head must be a TrainedHead or a TranslatorHead (with .save) for backend='dist'"
        )
    if not isinstance(model, str | Path):  # a directory's head is checked on the ranks
        resolve_head(head, LogitLens(model))
    ids = [as_prompt_ids(p, "cpu") for p in prompts]
    for one in ids:
        check_prompt_ids(one, config.vocab_size)
    check_context(config, [one.shape[1] for one in ids], max_new_tokens, names=request.sequences)
    return [one[0].tolist() for one in ids]


class RankGroup:
    """``world_size`` dist ranks that load ``model`` once and run tasks until closed.

    model: a local model directory, a loaded model (saved once to a temporary directory, so
    every rank loads identical weights; its dtype, device and attention kernel are the ranks'),
    or None (``run_task`` only: each task names its model directory); timeout_s: seconds a
    task may go without progress; job_kwargs: the other ``DistJob`` settings (``startup_s``,
    ``num_threads``, ``link_probe``, the failure hooks, ...). Use it as a context manager, in
    the thread that created it (module docstring)::

        with RankGroup(model_dir, world_size=3) as group:
            runs = group.run(prompts, d_bar=15, k=2, max_new_tokens=64)
    """

    def __init__(self, model=None, *, world_size=2, timeout_s=120.0, **job_kwargs):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
            raise ValueError(f"world_size must be an integer >= 2, got {world_size!r}")
        self.model = model
        self.config = None if model is None else _config(model)
        self._heads: list[tuple[object, str]] = []  # (head, the directory it was saved in)
        self._stack = ExitStack()
        try:
            self.tmp = self._stack.enter_context(tied_temp_dir("ppd-dist-"))
            job = DistJob(
                tasks=[],
                world_size=world_size,
                timeout_s=timeout_s,
                model_dir=None if model is None else _model_dir(model, self.tmp),
                **_model_job_kwargs(model),
                **job_kwargs,
            )
            if job.master_port == 0:
                job = replace(job, master_port=free_port())
            self.job = job
            self.ranks = TiedRanks(
                GROUP_ENTRY, (job.to_dict(),), world_size=world_size, what=WHAT, serve=True
            )
            self._stack.callback(self.ranks.close)
            self.ranks.wait(timeout_s=job.timeout_s, startup_s=job.startup_s)
        except BaseException:
            self._stack.close()
            raise

    @property
    def world_size(self) -> int:
        return self.job.world_size

    def run(self, prompts, request: PPDRequest | None = None, **fields) -> list:
        """PPD of every prompt on the group's model; a list of PPDResult (one per prompt).

        ``request``: the call whole (``PPDRequest``; ``ppd_many`` passes it on), or its fields
        as keywords (``d_bar``, ``k``, ``max_new_tokens``, ``head``, ``sequences``,
        ``early_head``, ``decoding``, ``eos_token_id``, ``seeds``, ``generator``,
        ``warmup``). early_head: ``main`` or ``candidates`` (the candidate ranks run the early
        head on main's layer-d_bar hidden state); head: a trained head (saved once per group
        for the ranks) or None (the logit lens); the settings' decoding, seeds (one per
        prompt, or None), generator: main's rule and draws (rank 0 starts from
        ``generator``'s state, which is not advanced); warmup: first decode
        ``WARMUP_TOKENS`` of the first prompt, untimed. Checked before any rank works on it.
        """
        if self.model is None:
            raise ValueError("model: this group was made without one; give run_task a DistTask")
        request = PPDRequest.of(request, fields)
        ids = check_task(self.model, prompts, request, config=self.config)
        return self.run_task(self.dist_task(ids, request))

    def dist_task(self, ids: list[list[int]], request: PPDRequest) -> DistTask:
        """``request`` on the token ids ``ids`` as the ranks receive it (plain data)."""
        r, settings = request, request.settings
        decoding = settings.decoding
        return DistTask(
            model_dir=self.job.model_dir, prompts=ids, d_bar=r.d_bar, k=r.k,
            max_new_tokens=r.max_new_tokens, eos_token_id=sorted(eos_set(settings.eos_token_id)),
            sequences=r.sequences, head_dir=self._head_dir(r.head), early_head=r.early_head,
            decoding=decoding.to_dict() if decoding.do_sample else None,
            seeds=None if r.seeds is None or all(x is None for x in r.seeds) else list(r.seeds),
            generator_state=None if r.generator is None else r.generator.get_state().tolist(),
            warmup=r.warmup,
        )  # fmt: skip

    def run_task(self, task: DistTask) -> list:
        """Run ``task`` on the first min(world_size, k + 1) ranks; rank 0's PPDResults.

        Raises DistRunError naming the failing rank (every rank killed; the group refuses
        further tasks), RuntimeError once the group is closed.
        """
        return self.ranks.request(asdict(task), timeout_s=self.job.timeout_s)[0]

    def call(self, target: str, **kwargs) -> list:
        """Every rank runs ``target(rank_state, **kwargs)`` (``target``: a name in
        ``RANK_CALLS``, checked here and on the ranks; ``rank_state``: the rank's
        ``measure.decode.launch.RankState``, with the group's model if it was made with one);
        each rank's return value, by rank. Watched and failing as ``run_task`` (an error on a
        rank ends the group). The profiler's pair probe runs this way between a validation's
        rounds (``measure.profile.ranks.pair_samples_on``)."""
        check_rank_call(target)
        request = {"call": target, "kwargs": kwargs}
        return self.ranks.request(request, timeout_s=self.job.timeout_s)

    def close(self) -> None:
        """Stop the ranks (each leaves its process group and exits) and remove the saved model."""
        self._stack.close()

    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _head_dir(self, head) -> str | None:
        """Where the ranks load ``head`` from (saved on its first task: the ranks keep what
        they loaded, so change a head's weights only in a new group); None for the lens."""
        if head is None or isinstance(head, LogitLens):
            return None
        for known, path in self._heads:
            if known is head:
                return path
        path = str(Path(self.tmp) / f"head-{len(self._heads)}")
        head.save(path)
        self._heads.append((head, path))
        return path


def _config(model):
    """The text config of a loaded model or of a local model (dir, .gguf, known name)."""
    if not isinstance(model, str | Path):
        return model.config.get_text_config()
    config = AutoConfig.from_pretrained(
        resolve_model_dir(model), local_files_only=True, trust_remote_code=False
    )
    return config.get_text_config()


def _model_dir(model, tmp: str) -> str:
    if isinstance(model, str | Path):
        return str(resolve_model_dir(model))
    path = Path(tmp) / "model"
    model.save_pretrained(path)
    return str(path)


def _model_job_kwargs(model) -> dict:
    if model is None or isinstance(model, str | Path):
        return {}
    return dict(
        dtype=str(model.dtype).removeprefix("torch."),
        device="cuda" if model.device.type == "cuda" else "cpu",
        attn_implementation=model.config._attn_implementation,
    )
