//! The `.pg` schema language: lexer, syntax tree and parser.
//!
//! [`parse_schema`] turns source text into an [`ast::Schema`] (syntax only);
//! `crate::lang::catalog::compile_schema` adds the semantic rules and
//! lowers the tree into a `Catalog`. Every failure is a located
//! [`Diagnostic`] carrying one of the stable codes below.
//!
//! | Code | Phase   | Meaning |
//! |------|---------|---------|
//! | S01  | lex     | unexpected character |
//! | S02  | lex     | unterminated string or block comment |
//! | S03  | parse   | unexpected token (message says what was expected) |
//! | S04  | parse   | malformed or out-of-range number |
//! | S05  | parse   | type name must start with an uppercase letter |
//! | S06  | parse   | property name must start with a lowercase letter or `_` |
//! | S07  | parse   | unknown property type |
//! | S08  | compile | duplicate type name (edges also clash case-insensitively) |
//! | S09  | compile | duplicate property name (including interface copies) |
//! | S10  | compile | `implements` names an unknown interface |
//! | S11  | compile | edge endpoint is not a declared node type |
//! | S12  | compile | reserved property name |
//! | S13  | compile | constraint names an unknown property, or one twice |
//! | S14  | compile | constraint or annotation not allowed here |
//! | S15  | compile | Blob property used as key/unique/index/embed |
//! | S16  | compile | Vector property used as key/unique |
//! | S17  | compile | key property is nullable or a list |
//! | S18  | compile | bad `@embed` (target not Vector, source not a String property) |
//! | S19  | compile | bad `@check` (regex does not compile, or property not String) |
//! | S20  | parse   | `@card` minimum greater than maximum |
//! | S21  | both    | bad `@range` (no bound, reversed, wrong kind, non-numeric property) |
//! | S22  | compile | more than one key on a node |
//! | S23  | both    | known annotation with wrong arguments, or repeated |
//! | S24  | parse   | `Vector(N)` dimension out of range |
//! | S25  | parse   | duplicate enum value |
//! | W01  | warning | unknown annotation (kept as custom metadata; the closest known name is suggested) |

pub mod ast;
pub mod codes;
pub mod lexer;
pub mod merge;
pub mod parser;
pub mod render;

use crate::lang::diag::Diagnostic;

/// Parses `.pg` source into its syntax tree (no semantic checks).
pub fn parse_schema(src: &str) -> Result<ast::Schema, Diagnostic> {
    parser::parse(src)
}

#[cfg(test)]
mod merge_tests;
#[cfg(test)]
mod tests;
