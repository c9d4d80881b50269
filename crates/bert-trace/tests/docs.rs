//! Every `console` block of the README and the walkthrough is run and its output checked
//! (trycmd reads the Markdown). Commands run in the directory of their Markdown file.
//! After a deliberate change, `TRYCMD=overwrite cargo test -p bert-trace --test docs` rewrites
//! the expected output; review the diff before committing it.

#[test]
fn readme_and_walkthrough_console_blocks() {
    trycmd::TestCases::new()
        .register_bin("bert-trace", trycmd::cargo::cargo_bin!("bert-trace"))
        .case("../../README.md")
        .case("../../walkthrough/*.md");
}
