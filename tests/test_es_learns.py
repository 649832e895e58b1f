"""ES learns where success is certain: a single-turn reward on the tiny Qwen3.5 LM."""

import torch

from esopt.es import ESConfig, ESTrainer, SigmaSchedule
from esopt.models.load import load_model_and_tokenizer


def test_es_teaches_the_tiny_lm_to_emit_a_target_token(smoke_model):
    model, tok = load_model_and_tokenizer(smoke_model, dtype="float32")
    prompt = tok.apply_chat_template([{"role": "user", "content": "say seven"}], tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    target = tok.convert_tokens_to_ids("7")

    @torch.no_grad()
    def next_token_logprobs():
        return torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)

    def greedy_token():
        return int(model.generate(input_ids=ids, max_new_tokens=1, do_sample=False, pad_token_id=tok.pad_token_id)[0, -1])

    start = next_token_logprobs()
    assert greedy_token() != target, "the target must not already be the model's answer"

    # Reward: log-probability of the target as the next token (one turn, dense signal).
    fitness = lambda member: (float(next_token_logprobs()[target]), {})
    cfg = ESConfig(population=16, generations=40, alpha=0.02, sigma=SigmaSchedule("cosine", 0.02, 0.005, total=40), antithetic=True, seed=0)
    ESTrainer(model, cfg, fitness, progress=False).run()

    assert next_token_logprobs()[target] > start[target] + 1.0
    assert greedy_token() == target
