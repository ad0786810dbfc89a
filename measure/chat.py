"""Prompt text -> token ids, through the tokenizer's chat template when it has one.

Instruct models answer a bare completion prompt badly (SmolLM2-135M-Instruct emits its
end-of-turn token at once on the paper's SQuAD template). So a prompt text (a Table 1 template
filled in, or a Spec-Bench question) becomes the *user turn* of the tokenizer's chat template,
followed by the template's assistant header; ``chat_template=False`` (CLI
``--no-chat-template``) encodes the bare text instead, as base models and the paper expect.
"""

from __future__ import annotations

from collections.abc import Sequence


def has_chat_template(tokenizer) -> bool:
    """True if ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def check_tokenizer(tokenizer) -> None:
    """ValueError unless ``tokenizer`` is a tokenizer: callable on a text (a Hugging Face
    tokenizer, or anything as ``tokenizer(text)["input_ids"]``)."""
    if not callable(tokenizer) or isinstance(tokenizer, type):
        raise ValueError(f"tokenizer must be a Hugging Face tokenizer, got "
                         f"{type(tokenizer).__name__}")  # fmt: skip


def uses_chat_template(tokenizer, chat_template: bool = True) -> bool:
    """Whether `encode_prompt` applies a chat template: asked for and the tokenizer has one."""
    if not isinstance(chat_template, bool):
        raise ValueError(f"chat_template must be True or False, got {chat_template!r}")
    return chat_template and has_chat_template(tokenizer)


def encode_prompt(tokenizer, text: str, *, chat_template: bool = True) -> list[int]:
    """Token ids of ``text``: as the user turn of the chat template, or the bare encoding.

    With a template, the rendered conversation (system prompt if the template adds one, the
    user turn, the assistant header) is encoded without adding special tokens again.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    check_tokenizer(tokenizer)
    if uses_chat_template(tokenizer, chat_template):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        return _ids(tokenizer, tokenizer(rendered, add_special_tokens=False))
    return _ids(tokenizer, tokenizer(text))


def _ids(tokenizer, encoded) -> list[int]:
    """The ``input_ids`` of a tokenizer's output; ValueError naming the tokenizer when it gave
    no such list of ids (no tokenizer)."""
    try:
        ids = list(encoded["input_ids"])
    except (TypeError, KeyError, IndexError):
        ids = None
    if ids is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        got = f"{type(tokenizer).__name__} returned {type(encoded).__name__}"
        raise ValueError(f"tokenizer must return {{'input_ids': [token ids]}} for a text, {got}")
    return ids


def encode_prompts(tokenizer, texts: Sequence[str], *, chat_template: bool = True):
    """`encode_prompt` of every text; ValueError if one encodes to no token."""
    ids = [encode_prompt(tokenizer, t, chat_template=chat_template) for t in texts]
    empty = [i for i, x in enumerate(ids) if not x]
    if empty:
        raise ValueError(f"prompts must encode to at least one token; prompt {empty[0]} is empty")
    return ids
