#!/usr/bin/env python3
"""The course model's recipe in PyTorch, for its speed beside `bert-trace train`'s.

    python scripts/bench_recipe_pytorch.py --model DIR --file TRAIN_TXT [--steps 200]
        [--batch-size 64] [--max-len 64] [--mask-prob 0.3] [--dropout 0] [--threads 2]

DIR holds the course model's config.json and tokenizer (target/english-small/init, which
scripts/make_english_small.sh writes). The run is phase 1 of that script as transformers would
run it: `BertForPreTraining(config)` with new weights, dropout off as the recipe runs it
(`--dropout 0`; `--dropout 0.1` gives BERT's, in train mode),
sequences of at most MAX_LEN tokens cut from the tokenized documents, DataCollatorForLanguage-
Modeling's masking at MASK_PROB (80/10/10), the MLM loss over every position's logits (as
`BertForPreTraining` computes them), clipping at 1, `torch.optim.AdamW` (betas 0.9,0.98, weight
decay 0.01 but for biases and LayerNorm) and a linear schedule with 300 warm-up steps of 8,000.
The batches are not bert-trace's (its packing and masks are its own), but they have its shape:
the same number of sequences, tokens per sequence and masked share. The arithmetic is not the
same: transformers computes the MLM head's logits at every position, bert-trace's training step
at the masked positions only (as Google's run_pretraining.py does).

It prints one JSON line: the steps, the tokens they read (padding excluded), the wall time of
the steps after the first, and the tokens per second.
"""

import argparse
import json
import random
import time

import torch
from transformers import BertConfig, BertForPreTraining, BertTokenizerFast, DataCollatorForLanguageModeling
from transformers import get_linear_schedule_with_warmup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--mask-prob", type=float, default=0.3)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step is not timed)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    random.seed(0)

    tokenizer = BertTokenizerFast.from_pretrained(args.model)
    config = BertConfig.from_pretrained(args.model, hidden_dropout_prob=args.dropout,
                                        attention_probs_dropout_prob=args.dropout)
    model = BertForPreTraining(config).train()
    # Sequences: each document's tokens, cut into pieces of at most max_len - 2.
    with open(args.file, encoding="utf-8") as f:
        documents = [d for d in f.read().split("\n\n") if d.strip()]
    piece = args.max_len - 2
    sequences = []
    for document in documents:
        ids = tokenizer(document.replace("\n", " "), add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids), piece):
            sequences.append([tokenizer.cls_token_id] + ids[start:start + piece] + [tokenizer.sep_token_id])
    random.shuffle(sequences)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mask_prob, return_tensors="pt")
    no_decay = ("bias", "LayerNorm")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.98), eps=1e-8, foreach=False)
    schedule = get_linear_schedule_with_warmup(optimizer, 300, 8000)

    tokens = 0
    started = None
    for step in range(args.steps):
        start = (step * args.batch_size) % (len(sequences) - args.batch_size + 1)
        chunk = sequences[start:start + args.batch_size]
        batch = collator([{"input_ids": s} for s in chunk])
        if step == 1:
            # The first step pays for first-touch memory and the allocator's warm-up: not timed.
            started = time.perf_counter()
        if step >= 1:
            tokens += int(batch["attention_mask"].sum())
        optimizer.zero_grad(set_to_none=True)
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        logits = out.prediction_logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    seconds = time.perf_counter() - started
    print(json.dumps({"side": "pytorch", "steps": args.steps - 1, "tokens": tokens, "seconds": round(seconds, 2),
                      "tokens_per_second": round(tokens / seconds), "dropout": args.dropout, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
