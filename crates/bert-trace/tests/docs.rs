//! Every `console` block of the README and the walkthrough is run and its output checked
//! (trycmd reads the Markdown). A chapter's commands run in walkthrough/, which its
//! `NN-name.in` link names; the README's run in this crate's directory.
//! After a deliberate change, `TRYCMD=overwrite cargo test -p bert-trace --test docs` rewrites
//! the expected output; review the diff before committing it.

#[test]
fn readme_and_walkthrough_console_blocks() {
    trycmd::TestCases::new()
        .register_bin("bert-trace", trycmd::cargo::cargo_bin!("bert-trace"))
        // No command in the docs may touch the network: hub ids resolve against an empty cache.
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", "dumps/hf-cache")
        .case("../../README.md")
        .case("../../walkthrough/*.md");
}
