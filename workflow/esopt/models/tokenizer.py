"""A small BPE tokenizer trained locally with `tokenizers`, with a Qwen-style chat template.

Two templates: CHAT_TEMPLATE (plain ChatML, the tiny models') and
qwen35_chat_template() (ChatML with Qwen3.5's thinking mode, for testing that
rollouts handle the real models' template).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

# Qwen's ChatML layout: the assistant turn ends with <|im_end|>, which is the EOS.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def qwen35_chat_template() -> str:
    """ChatML with the thinking mode Qwen3.5's model cards and template document:

    - generation prompt: `<|im_start|>assistant\n<think>\n` (the model writes its
      reasoning, `</think>`, then the answer), or with enable_thinking=False an
      empty block `<|im_start|>assistant\n<think>\n\n</think>\n\n`; thinking
      is on when enable_thinking is not given;
    - an assistant turn after the last user query is rendered with its think block
      (reasoning_content, or the text before `</think>` in content; empty if none);
    - an assistant turn before the last user query is rendered as its answer alone:
      re-rendering a conversation drops earlier turns' thinking, empty blocks included;
    - a user message that is a wrapped tool result (`<tool_response>...</tool_response>`)
      is not a query. Tool calls and the tool role are not modelled.

    Written from that description, not copied, so it may differ from Qwen's in details
    the description leaves open; tests use it to exercise the behaviour above.
    """
    return (
        "{%- set thinking = enable_thinking if enable_thinking is defined else true -%}"
        "{%- set ns = namespace(last_query=-1) -%}"
        "{%- for m in messages -%}"
        "{%- if m['role'] == 'user' and not (m['content'].startswith('<tool_response>')"
        " and m['content'].endswith('</tool_response>')) -%}{%- set ns.last_query = loop.index0 -%}{%- endif -%}"
        "{%- endfor -%}"
        "{%- for m in messages -%}"
        "{%- if m['role'] == 'assistant' -%}"
        "{%- set answer = m['content'] -%}{%- set thought = '' -%}"
        "{%- if m['reasoning_content'] is string -%}{%- set thought = m['reasoning_content'] -%}"
        "{%- elif '</think>' in answer -%}"
        "{%- set thought = answer.split('</think>')[0].split('<think>')[-1] -%}"
        "{%- set answer = answer.split('</think>')[-1] -%}"
        "{%- endif -%}"
        "{%- set answer = answer.lstrip('\n') -%}"
        "{%- if loop.index0 > ns.last_query -%}"
        "{{- '<|im_start|>assistant\n<think>\n' + thought.strip('\n') + '\n</think>\n\n' + answer + '<|im_end|>\n' -}}"
        "{%- else -%}"
        "{{- '<|im_start|>assistant\n' + answer + '<|im_end|>\n' -}}"
        "{%- endif -%}"
        "{%- else -%}"
        "{{- '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}"
        "{{- '<|im_start|>assistant\n' + ('<think>\n' if thinking else '<think>\n\n</think>\n\n') -}}"
        "{%- endif -%}"
    )


def train_tokenizer(corpus: Iterable[str], vocab_size: int, cell_tokens: bool = False) -> PreTrainedTokenizerFast:
    """Byte-level BPE (any text round-trips, so untrusted model output never breaks
    decoding) with digits kept as single tokens. GPT-2's pre-tokenizing regex keeps
    merges inside words: a newline never fuses with its neighbours, so a prompt
    tokenizes the same alone or followed by a reply.

    With `cell_tokens`, every "." is its own token too, so every board cell is one
    token and a cell's column is its offset from the line start. Without it, a run of
    empty cells may merge into one token ("..", "..."): the 4x4 default was measured
    so; on 6x6 boards, where runs are long, the merges scramble the columns."""
    tok = Tokenizer(models.BPE())
    splits = [pre_tokenizers.Digits(individual_digits=True)]
    if cell_tokens:
        splits.append(pre_tokenizers.Split(".", behavior="isolated"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits + [
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=PAD, bos_token=None, unk_token=None,
        padding_side="left", model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
