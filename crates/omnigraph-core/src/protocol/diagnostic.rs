//! Located diagnostics shared by the `.pg` and `.gq` compilers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A position in source text: 1-based line and column (columns count chars).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
}

impl Pos {
    /// Position of the char at byte `offset` in `src` (clamped to the end).
    pub fn at(src: &str, offset: usize) -> Pos {
        let offset = offset.min(src.len());
        let mut line = 1;
        let mut column = 1;
        for (i, ch) in src.char_indices() {
            if i >= offset {
                break;
            }
            if ch == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        Pos { line, column }
    }
}

/// One compile error: where, an optional stable code (`T1`..`T24` for the
/// query typechecker, `P…` for parse errors), and a one-line explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// Where the problem starts.
    pub pos: Pos,
    /// Stable error code users can search for, when one applies.
    pub code: Option<String>,
    /// One line saying what is wrong and what was expected.
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic without a code.
    pub fn new(pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic { pos, code: None, message: message.into() }
    }

    /// A diagnostic with a stable code.
    pub fn with_code(pos: Pos, code: &str, message: impl Into<String>) -> Self {
        Diagnostic { pos, code: Some(code.to_string()), message: message.into() }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.pos.line, self.pos.column)?;
        if let Some(code) = &self.code {
            write!(f, "[{code}] ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}
