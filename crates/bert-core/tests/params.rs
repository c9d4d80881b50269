//! Parameter counts against the published split of bert-base-uncased's BertModel:
//! 22.733M embeddings, 81.114M encoder, 0.563M pooler, 104.410M in all, in units of 2^20.
//! These figures come from outside this project (the usual per-part breakdown of BERT-base),
//! so the test checks our counting, not our own output.

use std::path::Path;

use bert_core::params::ParamCounts;
use bert_core::stage::HeadSet;
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
    let heads = HeadSet { pooler: true, ..HeadSet::default() };
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
