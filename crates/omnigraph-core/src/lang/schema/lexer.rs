//! Pull-based lexer for `.pg` source.
//!
//! The lexer is pulled one token at a time (rather than tokenising the whole
//! file up front) because enum values (`i-owe`, `phase-1`) use a different
//! word shape than identifiers; the parser asks for them explicitly with
//! [`Lexer::enum_value`] right after `enum(` or a `,` inside the list.

use super::codes;
use crate::lang::diag::{Diagnostic, Pos};
use std::cell::Cell;

/// What a token is. Identifiers include keywords: keywords in `.pg` are
/// contextual (a property may be called `node` or `edge`).
#[derive(Debug, Clone, PartialEq)]
pub enum TokenKind {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident(String),
    /// An integer literal, possibly signed; the text as written.
    Int(String),
    /// A float literal (has a fraction or exponent), possibly signed.
    Float(String),
    /// A string literal with escapes already resolved.
    Str(String),
    /// `@`
    At,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `:`
    Colon,
    /// `,`
    Comma,
    /// `?`
    Question,
    /// `->`
    Arrow,
    /// `..`
    DotDot,
    /// `=`
    Eq,
    /// End of input.
    Eof,
}

impl TokenKind {
    /// How the token is quoted in "found …" messages.
    pub fn describe(&self) -> String {
        match self {
            TokenKind::Ident(s) | TokenKind::Int(s) | TokenKind::Float(s) => format!("`{s}`"),
            TokenKind::Str(s) => format!("string \"{}\"", s.escape_default()),
            TokenKind::At => "`@`".into(),
            TokenKind::LParen => "`(`".into(),
            TokenKind::RParen => "`)`".into(),
            TokenKind::LBrace => "`{`".into(),
            TokenKind::RBrace => "`}`".into(),
            TokenKind::LBracket => "`[`".into(),
            TokenKind::RBracket => "`]`".into(),
            TokenKind::Colon => "`:`".into(),
            TokenKind::Comma => "`,`".into(),
            TokenKind::Question => "`?`".into(),
            TokenKind::Arrow => "`->`".into(),
            TokenKind::DotDot => "`..`".into(),
            TokenKind::Eq => "`=`".into(),
            TokenKind::Eof => "end of input".into(),
        }
    }
}

/// A token and the byte offset where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The token.
    pub kind: TokenKind,
    /// Byte offset of the first char in the source.
    pub start: usize,
}

/// Streaming lexer over one source string.
pub struct Lexer<'a> {
    src: &'a str,
    /// Byte offset of the next unread char; always on a char boundary.
    at: usize,
    /// Last position computed, so mostly-increasing lookups stay linear
    /// overall instead of rescanning from the start each time.
    pos_cache: Cell<(usize, Pos)>,
}

impl<'a> Lexer<'a> {
    /// A lexer positioned at the start of `src`.
    pub fn new(src: &'a str) -> Self {
        Lexer { src, at: 0, pos_cache: Cell::new((0, Pos { line: 1, column: 1 })) }
    }

    /// Line/column of a byte offset in this source (same rules as [`Pos::at`]).
    pub fn pos(&self, offset: usize) -> Pos {
        let (from, mut pos) = self.pos_cache.get();
        let Some(chunk) = self.src.get(from..offset) else {
            return Pos::at(self.src, offset);
        };
        for ch in chunk.chars() {
            if ch == '\n' {
                pos.line += 1;
                pos.column = 1;
            } else {
                pos.column += 1;
            }
        }
        self.pos_cache.set((offset, pos));
        pos
    }

    fn peek_char(&self) -> Option<char> {
        self.src.get(self.at..).and_then(|s| s.chars().next())
    }

    fn peek_char2(&self) -> Option<char> {
        self.src.get(self.at..).and_then(|s| s.chars().nth(1))
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn err(&self, offset: usize, code: &str, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::with_code(self.pos(offset), code, msg)
    }

    /// Skips whitespace and comments; an unclosed `/*` is an error.
    fn skip_trivia(&mut self) -> Result<(), Diagnostic> {
        loop {
            match (self.peek_char(), self.peek_char2()) {
                (Some(c), _) if c.is_whitespace() => {
                    self.bump();
                }
                (Some('/'), Some('/')) => {
                    while let Some(c) = self.bump() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                (Some('/'), Some('*')) => self.skip_block_comment()?,
                _ => return Ok(()),
            }
        }
    }

    fn skip_block_comment(&mut self) -> Result<(), Diagnostic> {
        let start = self.at;
        self.at += 2;
        loop {
            match self.bump() {
                None => {
                    return Err(self.err(
                        start,
                        codes::UNTERMINATED,
                        "unterminated block comment: expected `*/` before end of input",
                    ));
                }
                Some('*') if self.peek_char() == Some('/') => {
                    self.bump();
                    return Ok(());
                }
                Some(_) => {}
            }
        }
    }

    /// The next token, skipping trivia.
    pub fn next_token(&mut self) -> Result<Token, Diagnostic> {
        self.skip_trivia()?;
        let start = self.at;
        let Some(c) = self.peek_char() else {
            return Ok(Token { kind: TokenKind::Eof, start });
        };
        let kind = match c {
            'A'..='Z' | 'a'..='z' | '_' => TokenKind::Ident(self.take_while(is_ident_char)),
            '0'..='9' => self.number(start)?,
            '-' => self.dash(start)?,
            '"' => TokenKind::Str(self.string(start)?),
            '.' => self.dot_dot(start)?,
            _ => self.punct(c, start)?,
        };
        Ok(Token { kind, start })
    }

    fn punct(&mut self, c: char, start: usize) -> Result<TokenKind, Diagnostic> {
        let kind = match c {
            '@' => TokenKind::At,
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            '{' => TokenKind::LBrace,
            '}' => TokenKind::RBrace,
            '[' => TokenKind::LBracket,
            ']' => TokenKind::RBracket,
            ':' => TokenKind::Colon,
            ',' => TokenKind::Comma,
            '?' => TokenKind::Question,
            '=' => TokenKind::Eq,
            other => {
                return Err(self.err(
                    start,
                    codes::BAD_CHAR,
                    format!("unexpected character `{}`", other.escape_default()),
                ));
            }
        };
        self.bump();
        Ok(kind)
    }

    fn dot_dot(&mut self, start: usize) -> Result<TokenKind, Diagnostic> {
        if self.peek_char2() == Some('.') {
            self.at += 2;
            Ok(TokenKind::DotDot)
        } else {
            Err(self.err(start, codes::BAD_CHAR, "unexpected character `.`: expected `..`"))
        }
    }

    /// `->` or a negative number.
    fn dash(&mut self, start: usize) -> Result<TokenKind, Diagnostic> {
        match self.peek_char2() {
            Some('>') => {
                self.at += 2;
                Ok(TokenKind::Arrow)
            }
            Some('0'..='9') => {
                self.bump();
                self.number(start)
            }
            _ => Err(self.err(start, codes::BAD_CHAR, "unexpected character `-`: expected `->` or a number")),
        }
    }

    /// Digits with an optional fraction and exponent. A `.` only starts a
    /// fraction when a digit follows, so `0..5` lexes as `0`, `..`, `5`.
    fn number(&mut self, start: usize) -> Result<TokenKind, Diagnostic> {
        self.take_while(|c| c.is_ascii_digit());
        let mut is_float = false;
        if self.peek_char() == Some('.') && self.peek_char2().is_some_and(|c| c.is_ascii_digit()) {
            is_float = true;
            self.bump();
            self.take_while(|c| c.is_ascii_digit());
        }
        if matches!(self.peek_char(), Some('e' | 'E')) {
            is_float = true;
            self.bump();
            if matches!(self.peek_char(), Some('+' | '-')) {
                self.bump();
            }
            if self.take_while(|c| c.is_ascii_digit()).is_empty() {
                return Err(self.err(start, codes::BAD_NUMBER, "malformed number: expected digits after the exponent"));
            }
        }
        if self.peek_char().is_some_and(is_ident_char) {
            return Err(self.err(start, codes::BAD_NUMBER, "malformed number: letters directly after digits"));
        }
        let text = self.src.get(start..self.at).unwrap_or_default().to_string();
        Ok(if is_float { TokenKind::Float(text) } else { TokenKind::Int(text) })
    }

    /// A `"…"` string. `\"`, `\\`, `\n`, `\t`, `\r` are resolved; any other
    /// escape is kept verbatim so regexes such as `"\d+"` read naturally.
    fn string(&mut self, start: usize) -> Result<String, Diagnostic> {
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => {
                    return Err(self.err(
                        start,
                        codes::UNTERMINATED,
                        "unterminated string: expected closing `\"` on the same line",
                    ));
                }
                Some('"') => return Ok(out),
                Some('\\') => match self.bump() {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some(other) => {
                        out.push('\\');
                        out.push(other);
                    }
                    None => {}
                },
                Some(c) => out.push(c),
            }
        }
    }

    fn take_while(&mut self, pred: impl Fn(char) -> bool) -> String {
        let start = self.at;
        while self.peek_char().is_some_and(&pred) {
            self.bump();
        }
        self.src.get(start..self.at).unwrap_or_default().to_string()
    }

    /// An enum value `[A-Za-z0-9_-]+` (after trivia); `None` when the next
    /// char cannot start one. Returns the value and its byte offset.
    pub fn enum_value(&mut self) -> Result<Option<(String, usize)>, Diagnostic> {
        self.skip_trivia()?;
        let start = self.at;
        let text = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        Ok(if text.is_empty() { None } else { Some((text, start)) })
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<TokenKind> {
        let mut lx = Lexer::new(src);
        let mut out = Vec::new();
        loop {
            let t = lx.next_token().unwrap();
            if t.kind == TokenKind::Eof {
                return out;
            }
            out.push(t.kind);
        }
    }

    #[test]
    fn lexes_ranges_arrows_and_comments() {
        let k = kinds("a -> B /* x */ // y\n 0..5 -1.5.. 2e3 \"q\\\"\\d\"");
        assert_eq!(
            k,
            vec![
                TokenKind::Ident("a".into()),
                TokenKind::Arrow,
                TokenKind::Ident("B".into()),
                TokenKind::Int("0".into()),
                TokenKind::DotDot,
                TokenKind::Int("5".into()),
                TokenKind::Float("-1.5".into()),
                TokenKind::DotDot,
                TokenKind::Float("2e3".into()),
                TokenKind::Str("q\"\\d".into()),
            ]
        );
    }

    #[test]
    fn enum_values_allow_dashes_and_digits() {
        let mut lx = Lexer::new("  i-owe, 3d");
        assert_eq!(lx.enum_value().unwrap(), Some(("i-owe".into(), 2)));
    }
}
