#!/usr/bin/env python3
"""Train the same model in PyTorch on the same batches as a `bert-trace train` or
`bert-trace finetune` run, for the reference the Rust tests compare that run against (llm.c's
test_gpt2, for BERT).

    bert-trace train --model MODEL --file F --steps N ... --save RUN --dump-step 1-N
    bert-trace finetune --model MODEL --file F.tsv --steps N ... --save RUN --dump-step 1-N
    python scripts/train_reference.py --run RUN --out OUT

A fine-tuning run (its config.json says BertForSequenceClassification) is trained as
transformers' BertForSequenceClassification (single-label: cross-entropy on the classifier's
logits and input.class_labels), with the run's --max-grad-norm (torch.nn.utils.clip_grad_norm_
before each step) and --no-decay (a second parameter group with weight decay 0 for the names
that contain one of its parts) when it used them.

For every step K the batch comes from RUN/step-K/ (input.ids, input.token_type_ids,
input.attention_mask, input.labels and input.next_sentence_label: the masks and the NSP
negatives bert-trace drew), and the starting parameters from RUN/step-1/param.* (so that a
checkpoint without the pretraining heads, whose new heads bert-trace drew from its seed, starts
from the same values; for heads the checkpoint has, param.* is checked to equal its weights).
The model is transformers' BertForPreTraining in eval mode; a run that dropped out (its
step dumps hold `*_dropout_mask` stages) has its masks applied wherever transformers drops:
`torch.nn.functional.dropout`, which every `nn.Dropout` and eager attention's dropout call, is
replaced by one that multiplies by the next of the step's masks, in the order the pass reaches
them (the embeddings', then each layer's attention probabilities', attention output's and
feed-forward output's, then a classifier's), each checked to be of the tensor's shape. The
optimizer torch.optim.AdamW with the run's betas, eps and weight decay (its
single-tensor form, PyTorch's default for CPU tensors), the schedule transformers'
get_linear_schedule_with_warmup.

OUT gets:
  reference.json  the run's options and, per step, PyTorch's loss (and MLM and NSP losses) and
                  learning rate;
  step-K/         a dump (manifest.json + .npy) of step K (--param-step, default 1; after a
                  warm-up, the first step whose learning rate is not 0): the batch, param.*
                  before the step, grad.param.* and updated.param.* after optimizer.step(),
                  which `bert-trace diff OUT/step-K RUN/step-K` compares.

The script also loads RUN (the checkpoint bert-trace saved) with
BertForPreTraining.from_pretrained and checks that nothing is missing, unexpected or of the
wrong shape, that its parameters are RUN's, and prints how far they are from PyTorch's after
N steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_reference import FORMAT, Stage, write_dump  # noqa: E402


def read_step(run: str, k: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The manifest and the arrays of RUN/step-K."""
    d = os.path.join(run, f"step-{k}")
    path = os.path.join(d, "manifest.json")
    if not os.path.isfile(path):
        sys.exit(f"error: {d}: no manifest.json; run bert-trace train with --dump-step 1-N")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    arrays = {st["name"]: np.load(os.path.join(d, st["file"]), allow_pickle=False) for st in manifest["stages"]}
    return manifest, arrays


class DumpedDropout:
    """`torch.nn.functional.dropout` with bert-trace's masks: each call multiplies by the next
    mask of the step (0 where dropped, 1/(1-p) where kept: the tensor PyTorch's CPU dropout
    multiplies by). With no masks loaded, the identity (eval mode)."""

    def __init__(self) -> None:
        self.masks: list[tuple[str, torch.Tensor]] = []

    def load(self, arrays: dict[str, np.ndarray], names: list[str]) -> None:
        self.masks = [(n, torch.from_numpy(arrays[n])) for n in names if n.endswith("dropout_mask")]

    def __call__(self, input, p=0.5, training=True, inplace=False):  # noqa: A002 (torch's names)
        if not self.masks:
            return input
        name, mask = self.masks.pop(0)
        assert tuple(mask.shape) == tuple(input.shape), f"{name} is {tuple(mask.shape)}, the tensor {tuple(input.shape)}"
        return input * mask

    def done(self) -> None:
        assert not self.masks, f"masks the pass never reached: {[n for n, _ in self.masks]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="the directory bert-trace train --save wrote")
    ap.add_argument("--out", required=True, help="where to write reference.json and step-K/")
    ap.add_argument("--param-step", type=int, default=1, metavar="K", help="the step whose parameters to dump")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    with open(os.path.join(args.run, "trainer_state.json"), encoding="utf-8") as f:
        state = json.load(f)
    options = state["options"]
    steps = options["steps"]
    config = transformers.BertConfig.from_pretrained(args.run)
    config._attn_implementation = "eager"
    classifier = config.architectures == ["BertForSequenceClassification"]
    cls = transformers.BertForSequenceClassification if classifier else transformers.BertForPreTraining
    model = cls(config)
    model.eval()
    dropout = DumpedDropout()
    torch.nn.functional.dropout = dropout
    named = dict(model.named_parameters())
    if not classifier:
        assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight, "decoder not tied"

    # The starting point: step 1's param.* from bert-trace.
    manifest1, arrays1 = read_step(args.run, 1)
    with torch.no_grad():
        for name, p in named.items():
            value = arrays1.get(f"param.{name}")
            if value is None:
                sys.exit(f"error: {args.run}/step-1 has no param.{name}")
            p.copy_(torch.from_numpy(value))
    # Every parameter the run did not make new starts as the checkpoint stores it.
    source = manifest1.get("model")
    if source and os.path.isfile(os.path.join(source, "model.safetensors")):
        stored = load_file(os.path.join(source, "model.safetensors"))
        for name, p in named.items():
            if any(name.startswith(head + ".") for head in state["fresh_heads"]):
                continue
            alias = next((a for a in (name, name.removeprefix("bert.")) if a in stored), None)
            assert alias is not None, f"param.{name}: {source} has no such tensor, and the run did not make it new"
            assert np.array_equal(stored[alias], p.detach().numpy()), f"param.{name} is not {source}'s"
    else:
        sys.exit(f"error: step-1's model {source!r} is not a directory with model.safetensors (run from the repository root)")

    b = options["adamw"]
    # BERT's recipe: no weight decay for the parameters whose names contain one of no_decay's parts.
    no_decay = options.get("no_decay", [])
    decayed = [p for n, p in named.items() if not any(part in n for part in no_decay)]
    undecayed = [p for n, p in named.items() if any(part in n for part in no_decay)]
    groups = [{"params": decayed}] + ([{"params": undecayed, "weight_decay": 0.0}] if undecayed else [])
    optimizer = torch.optim.AdamW(groups, lr=options["lr"], betas=(b["beta1"], b["beta2"]),
                                  eps=b["eps"], weight_decay=b["weight_decay"], foreach=False, fused=False)
    max_grad_norm = options.get("max_grad_norm")
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, options["warmup_steps"], steps)
    ce = torch.nn.CrossEntropyLoss()
    rows = []
    checked = None
    for k in range(1, steps + 1):
        manifest, arrays = read_step(args.run, k) if k > 1 else (manifest1, arrays1)
        ids = torch.from_numpy(arrays["input.ids"])
        inputs = dict(input_ids=ids, token_type_ids=torch.from_numpy(arrays["input.token_type_ids"]),
                      attention_mask=torch.from_numpy(arrays["input.attention_mask"]))
        if k == 1:
            first_inputs = inputs
        before = {n: p.detach().clone() for n, p in named.items()} if k == args.param_step else None
        lr = optimizer.param_groups[0]["lr"]
        order = [st["name"] for st in manifest["stages"]]
        dropout.load(arrays, order)
        out = model(**inputs)
        dropout.done()
        if classifier:
            classes = torch.from_numpy(arrays["input.class_labels"])
            loss = ce(out.logits, classes)
            dropout.load(arrays, order)
            own = model(**inputs, labels=classes).loss  # transformers' own, single-label
            assert torch.equal(own, loss), (own, loss)
            mlm_loss = nsp_loss = None
        else:
            labels = torch.from_numpy(arrays["input.labels"])
            nsp = arrays.get("input.next_sentence_label")
            nsp = torch.from_numpy(nsp) if nsp is not None else None
            mlm_loss = ce(out.prediction_logits.view(-1, config.vocab_size), labels.view(-1))
            nsp_loss = ce(out.seq_relationship_logits.view(-1, 2), nsp.view(-1)) if nsp is not None else None
            loss = mlm_loss + nsp_loss if nsp_loss is not None else mlm_loss
            if nsp is not None:
                # transformers' own loss, given both labels, is the same sum.
                dropout.load(arrays, order)
                own = model(**inputs, labels=labels, next_sentence_label=nsp).loss
                assert torch.equal(own, loss), (own, loss)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if k == args.param_step:
            grads = {n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None}
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        schedule.step()
        rows.append({"step": k, "loss": loss.item(), "mlm_loss": None if mlm_loss is None else mlm_loss.item(),
                     "nsp_loss": None if nsp_loss is None else nsp_loss.item(), "lr": lr})
        print(f"step {k}/{steps}  loss {loss.item():.4f}  lr {lr:.3e}", file=sys.stderr)
        if k == args.param_step:
            checked = (manifest, arrays, before, grads, {n: p.detach().clone() for n, p in named.items()})

    if checked is None:
        sys.exit(f"error: --param-step {args.param_step}: the run has {steps} steps")
    manifest, arrays, before, grads, after = checked
    stages = [Stage(name, torch.from_numpy(arrays[name]), name, "") for name in
              ("input.ids", "input.token_type_ids", "input.attention_mask", "input.labels",
               "input.next_sentence_label", "input.class_labels") if name in arrays]
    stages += [Stage(f"param.{n}", t, n, "") for n, t in before.items()]
    stages += [Stage(f"grad.param.{n}", t, f"{n}.grad", "") for n, t in grads.items()]
    stages += [Stage(f"updated.param.{n}", t, f"{n} after optimizer.step()", "") for n, t in after.items()]
    dump_manifest = {
        "format": FORMAT,
        "producer": {"name": "train_reference.py", "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "model": manifest.get("model"),
        "inputs": manifest["inputs"],
        "no_gradient": [n for n in named if n not in grads],
        "stages": [{"name": s.name, "shape": list(s.tensor.shape),
                    "dtype": {torch.float32: "float32", torch.int64: "int64"}[s.tensor.dtype],
                    "file": f"{s.name}.npy", "hf": s.hf, "formula": s.formula} for s in stages],
    }
    os.makedirs(args.out, exist_ok=True)
    write_dump(os.path.join(args.out, f"step-{args.param_step}"), dump_manifest, stages)
    reference = {"producer": dump_manifest["producer"], "options": options, "param_step": args.param_step,
                 "steps": rows}
    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(reference, indent=2) + "\n")

    # The checkpoint bert-trace saved, as transformers loads it.
    saved, info = cls.from_pretrained(args.run, output_loading_info=True)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), (key, info[key])
    saved.eval()
    stored = load_file(os.path.join(args.run, "model.safetensors"))
    worst = 0.0
    for name, p in saved.named_parameters():
        assert np.array_equal(p.detach().numpy(), stored[name]), f"{name}: from_pretrained changed it"
        worst = max(worst, float((p.detach() - named[name].detach()).abs().max()))
    if classifier:
        assert saved.config.id2label == config.id2label and saved.config.problem_type == "single_label_classification"
        # The same logits as the model PyTorch trained, on step 1's batch.
        with torch.no_grad():
            ours, theirs = saved(**first_inputs).logits, model(**first_inputs).logits
        # After ten steps the two models differ by the key bias's rounding noise (a step of ±lr
        # on a parameter softmax ignores) and float32 rounding: far below this.
        assert float((ours - theirs).abs().max()) <= 1e-4, (ours, theirs)
        print(f"from_pretrained({args.run}): logits on step 1's batch within {float((ours - theirs).abs().max()):.3g} "
              "of PyTorch's model's", file=sys.stderr)
    else:
        assert saved.cls.predictions.decoder.weight is saved.bert.embeddings.word_embeddings.weight
    print(f"from_pretrained({args.run}): every parameter loaded; after {steps} steps the largest difference "
          f"from PyTorch's is {worst:.3g}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
