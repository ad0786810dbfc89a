"""Prompt encoding: the user turn of the tokenizer's chat template, or the bare text."""

from __future__ import annotations

import pytest

from measure.chat import encode_prompt, encode_prompts, has_chat_template, uses_chat_template
from tests.measure.tiny_models import char_tokenizer

TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture
def tokenizers():
    bare = char_tokenizer()
    chat = char_tokenizer()
    chat.chat_template = TEMPLATE
    return bare, chat


def test_chat_template_makes_the_text_the_user_turn(tokenizers):
    bare, chat = tokenizers
    ids = encode_prompt(chat, "Hi")
    assert ids == bare("<user>Hi</><assistant>")["input_ids"]
    assert encode_prompt(chat, "Hi", chat_template=False) == bare("Hi")["input_ids"]
    assert encode_prompt(bare, "Hi") == bare("Hi")["input_ids"]  # no template: bare text
    assert has_chat_template(chat) and not has_chat_template(bare)
    assert uses_chat_template(chat) and not uses_chat_template(chat, False)


def test_bad_input(tokenizers):
    _, chat = tokenizers
    with pytest.raises(ValueError, match="chat_template must be True or False"):
        encode_prompt(chat, "Hi", chat_template="yes")
    with pytest.raises(ValueError, match="text must be a string"):
        encode_prompt(chat, 3)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        encode_prompts(tokenizers[0], ["a", ""], chat_template=False)
