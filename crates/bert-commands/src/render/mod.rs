//! Reports as the terminal shows them, and as Python's tables and `str()` give them: tables and
//! numbers ([`text_table`]), the tokens a model sees ([`tokens_table`]), a stage's first values
//! ([`preview`]), the heads' predictions and the losses
//! ([`predictions`]), and an attention head as a coloured heatmap ([`terminal_heatmap`]).

pub mod predictions;
pub mod preview;
pub mod terminal_heatmap;
pub mod text_table;
pub mod tokens_table;
