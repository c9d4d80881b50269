//! Parameter counts and stage shapes from config.json alone. bert-base-uncased against the
//! published split of its BertModel:
//! 22.733M embeddings, 81.114M encoder, 0.563M pooler, 104.410M in all, in units of 2^20.
//! These figures come from outside this project (the usual per-part breakdown of BERT-base),
//! so the test checks our counting, not our own output. bert-large (24 layers, 1024 wide, 16
//! heads): its count worked out by hand against the published 335M, and the shape of every one
//! of its 351 stages, with no weights at all.

use std::path::Path;

use bert_core::model::size::ParamCounts;
use bert_core::stage::OutputHeads;
use bert_core::BertConfig;

const BERT_BASE: &str = r#"{"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
    "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12}"#;

fn mebi(count: usize) -> String {
    format!("{:.3}", count as f64 / (1u64 << 20) as f64)
}

#[test]
fn bert_base_matches_the_published_split() {
    let config = BertConfig::from_json(BERT_BASE.as_bytes(), Path::new("bert-base/config.json")).unwrap();
    let heads = OutputHeads { pooler: true, ..OutputHeads::default() };
    let counts = ParamCounts::new(&config, heads, 0);
    let cases = [
        ("embeddings", counts.embeddings, "22.733"),
        ("encoder", counts.encoder, "81.114"),
        ("pooler", counts.pooler, "0.563"),
        ("total", counts.total(), "104.410"),
    ];
    for (part, count, published) in cases {
        assert_eq!(mebi(count), published, "{part}: expected {published}M (2^20), got {} = {count}", mebi(count));
    }
}

/// bert-large-uncased's config.json (24 layers, H 1024, 16 heads, I 4096).
const BERT_LARGE: &str = r#"{"architectures": ["BertForMaskedLM"], "model_type": "bert",
    "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
    "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512,
    "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}"#;

/// The parameter count of bert-large's BertModel, worked out by hand from the architecture:
///
/// - embeddings: (30522 words + 512 positions + 2 types) × 1024 + LayerNorm 2 × 1024
///   = 31 780 864 + 2 048 = 31 782 912
/// - one layer: Q, K, V and the attention output, 4 × (1024 × 1024 + 1024) = 4 198 400;
///   intermediate 1024 × 4096 + 4096 = 4 198 400; output 4096 × 1024 + 1024 = 4 195 328;
///   two LayerNorms 4 × 1024 = 4 096; in all 12 596 224
/// - encoder: 24 × 12 596 224 = 302 309 376
/// - pooler: 1024 × 1024 + 1024 = 1 049 600
/// - total: 31 782 912 + 302 309 376 + 1 049 600 = 335 141 888, the "335M" published for
///   bert-large-uncased (the BERT paper's 340M counts the pre-training heads too).
const BERT_LARGE_TOTAL: usize = 335_141_888;

#[test]
fn bert_large_counts_come_out_of_the_formula() {
    let config = BertConfig::from_json(BERT_LARGE.as_bytes(), Path::new("bert-large/config.json")).unwrap();
    let heads = OutputHeads { pooler: true, ..OutputHeads::default() };
    let counts = ParamCounts::new(&config, heads, 0);
    let cases = [
        ("embeddings", counts.embeddings, 31_782_912),
        ("one layer", counts.per_layer, 12_596_224),
        ("encoder", counts.encoder, 302_309_376),
        ("pooler", counts.pooler, 1_049_600),
        ("total", counts.total(), BERT_LARGE_TOTAL),
    ];
    for (part, got, want) in cases {
        assert_eq!(got, want, "{part}: expected {want}, got {got}");
    }
    let published = 335e6;
    let off = (BERT_LARGE_TOTAL as f64 - published).abs() / published;
    assert!(off < 0.005, "{BERT_LARGE_TOTAL} is {:.2}% away from the published 335M", off * 100.0);
}

/// The shape each stage of bert-large must have for a batch of 2 × 7 tokens, by hand: the
/// table below is written from the architecture, not from `stage.rs`.
fn bert_large_shape(name: &str) -> Vec<usize> {
    let (b, t, h, nh, hs, i, v) = (2, 7, 1024, 16, 64, 4096, 30522);
    let tail = name.split_once('.').map_or(name, |(head, rest)| if head.starts_with("layer") { rest } else { name });
    match tail {
        "input.ids" | "input.token_type_ids" | "input.attention_mask" => vec![b, t],
        "attention.query" | "attention.key" | "attention.value" => vec![b, nh, t, hs],
        "attention.scores" | "attention.probs" => vec![b, nh, t, t],
        "ffn.intermediate" | "ffn.activation" => vec![b, t, i],
        "pooler.dense" | "pooler.output" => vec![b, h],
        "mlm.logits" => vec![b, t, v],
        "nsp.logits" => vec![b, 2],
        _ => vec![b, t, h],
    }
}

#[test]
fn bert_large_stage_shapes_from_config_alone() {
    let config = BertConfig::from_json(BERT_LARGE.as_bytes(), Path::new("bert-large/config.json")).unwrap();
    let heads = OutputHeads { pooler: true, mlm: true, nsp: true, ..OutputHeads::default() };
    let plan = bert_core::stage::plan(config.num_hidden_layers, heads, Default::default());
    // 3 inputs, 5 embeddings, 24 layers × 14, 2 pooler, 4 MLM, 1 NSP.
    assert_eq!(plan.len(), 3 + 5 + 24 * 14 + 2 + 4 + 1, "stage count");
    let dims = config.dims(2, 7, 0);
    let mismatches: Vec<String> = plan
        .iter()
        .filter(|stage| stage.shape(&dims) != bert_large_shape(&stage.name()))
        .map(|stage| {
            format!("{}: expected {:?}, got {:?}", stage.name(), bert_large_shape(&stage.name()), stage.shape(&dims))
        })
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_eq!(plan.last().unwrap().name(), "nsp.logits");
    assert!(plan.iter().any(|s| s.name() == "layer23.ffn.layernorm"));
}
