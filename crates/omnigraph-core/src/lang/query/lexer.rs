//! Tokenizer for `.gq` source.
//!
//! Produces a flat token list ending in [`Tok::Eof`]. Whitespace and comments
//! (`// …` to end of line, `/* … */` non-nesting) are skipped. Positions are
//! tracked incrementally with the same convention as [`Pos::at`]: 1-based
//! lines and 1-based columns counted in characters.

use crate::lang::diag::{Diagnostic, Pos};

/// One lexical token kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// A word: `[A-Za-z_][A-Za-z0-9_]*`. Keywords are recognised by the parser
    /// from context, so property names such as `match` or `date` stay legal.
    Ident(String),
    /// `$name` or `$_` (the name is stored without the `$`).
    Var(String),
    /// `@name` (annotation head, stored without the `@`).
    At(String),
    /// A string literal, escapes already decoded.
    Str(String),
    /// An unsigned integer literal.
    Int(u64),
    /// An unsigned float literal `digits.digits`.
    Float(f64),
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Colon,
    Dot,
    Question,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// End of input.
    Eof,
}

impl Tok {
    /// A short human description used in "found …" messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Var(s) => format!("variable `${s}`"),
            Tok::At(s) => format!("annotation `@{s}`"),
            Tok::Str(_) => "a string literal".to_string(),
            Tok::Int(n) => format!("integer `{n}`"),
            Tok::Float(f) => format!("float `{f}`"),
            Tok::Eof => "end of input".to_string(),
            other => format!("`{}`", other.punct()),
        }
    }

    fn punct(&self) -> &'static str {
        match self {
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Dot => ".",
            Tok::Question => "?",
            Tok::Eq => "=",
            Tok::Ne => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            _ => "?",
        }
    }
}

/// A token with the position of its first character.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) pos: Pos,
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: u32,
    column: u32,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl Lexer<'_> {
    fn pos(&self) -> Pos {
        Pos { line: self.line, column: self.column }
    }

    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.chars.clone();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.column = 1;
        } else {
            self.column = self.column.saturating_add(1);
        }
        Some(c)
    }

    fn word(&mut self) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek() {
            if !is_ident_char(c) {
                break;
            }
            s.push(c);
            self.bump();
        }
        s
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<(), Diagnostic> {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('/') if self.peek2() == Some('/') => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                Some('/') if self.peek2() == Some('*') => {
                    let start = self.pos();
                    self.bump();
                    self.bump();
                    loop {
                        match self.bump() {
                            None => {
                                return Err(Diagnostic::with_code(
                                    start,
                                    "Q04",
                                    "unterminated block comment: expected `*/` before end of input",
                                ));
                            }
                            Some('*') if self.peek() == Some('/') => {
                                self.bump();
                                break;
                            }
                            Some(_) => {}
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn string(&mut self, start: Pos) -> Result<Tok, Diagnostic> {
        self.bump(); // opening quote
        let mut out = String::new();
        loop {
            let here = self.pos();
            match self.bump() {
                None => {
                    return Err(Diagnostic::with_code(
                        start,
                        "Q02",
                        "unterminated string literal: expected closing `\"`, found end of input",
                    ));
                }
                Some('"') => return Ok(Tok::Str(out)),
                Some('\\') => {
                    let c = self.bump();
                    match c {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('r') => out.push('\r'),
                        Some('0') => out.push('\0'),
                        Some('"') => out.push('"'),
                        Some('\'') => out.push('\''),
                        Some('\\') => out.push('\\'),
                        Some('/') => out.push('/'),
                        Some('u') => out.push(self.unicode_escape(here)?),
                        Some(other) => {
                            return Err(Diagnostic::with_code(
                                here,
                                "Q03",
                                format!(
                                    "invalid escape sequence `\\{}` in string literal: expected one of \\n \\t \\r \\0 \\\" \\' \\\\ \\/ \\u{{…}}",
                                    other.escape_debug()
                                ),
                            ));
                        }
                        None => {
                            return Err(Diagnostic::with_code(
                                start,
                                "Q02",
                                "unterminated string literal: expected closing `\"`, found end of input",
                            ));
                        }
                    }
                }
                Some(c) => out.push(c),
            }
        }
    }

    /// Decodes the rest of `\u{XXXX}` (the `\u` is consumed).
    fn unicode_escape(&mut self, at: Pos) -> Result<char, Diagnostic> {
        let bad = |msg: &str| {
            Diagnostic::with_code(
                at,
                "Q03",
                format!(
                    "invalid escape sequence: expected `\\u{{hex}}` with 1-6 hex digits naming a Unicode scalar value, {msg}"
                ),
            )
        };
        if self.peek() != Some('{') {
            return Err(bad("found no `{`"));
        }
        self.bump();
        let mut value: u32 = 0;
        let mut digits = 0;
        loop {
            match self.peek() {
                Some('}') => {
                    self.bump();
                    break;
                }
                Some(c) if c.is_ascii_hexdigit() && digits < 6 => {
                    self.bump();
                    value = value * 16 + c.to_digit(16).unwrap_or(0);
                    digits += 1;
                }
                _ => return Err(bad("found something else")),
            }
        }
        if digits == 0 {
            return Err(bad("found no digits"));
        }
        char::from_u32(value).ok_or_else(|| bad("found an invalid code point"))
    }

    fn number(&mut self, start: Pos) -> Result<Tok, Diagnostic> {
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if !c.is_ascii_digit() {
                break;
            }
            text.push(c);
            self.bump();
        }
        let is_float = self.peek() == Some('.') && self.peek2().is_some_and(|c| c.is_ascii_digit());
        if is_float {
            text.push('.');
            self.bump();
            while let Some(c) = self.peek() {
                if !c.is_ascii_digit() {
                    break;
                }
                text.push(c);
                self.bump();
            }
            match text.parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Tok::Float(f)),
                _ => Err(Diagnostic::with_code(
                    start,
                    "Q05",
                    format!("float literal `{text}` is out of range: expected a finite number"),
                )),
            }
        } else {
            text.parse::<u64>().map(Tok::Int).map_err(|_| {
                Diagnostic::with_code(
                    start,
                    "Q05",
                    format!("integer literal `{text}` is out of range: expected at most {}", u64::MAX),
                )
            })
        }
    }

    fn next_token(&mut self) -> Result<Token, Diagnostic> {
        self.skip_trivia()?;
        let pos = self.pos();
        let Some(c) = self.peek() else {
            return Ok(Token { tok: Tok::Eof, pos });
        };
        let single = |l: &mut Self, t: Tok| {
            l.bump();
            Ok(Token { tok: t, pos })
        };
        match c {
            '{' => single(self, Tok::LBrace),
            '}' => single(self, Tok::RBrace),
            '(' => single(self, Tok::LParen),
            ')' => single(self, Tok::RParen),
            '[' => single(self, Tok::LBracket),
            ']' => single(self, Tok::RBracket),
            ',' => single(self, Tok::Comma),
            ':' => single(self, Tok::Colon),
            '.' => single(self, Tok::Dot),
            '?' => single(self, Tok::Question),
            '=' => single(self, Tok::Eq),
            '!' if self.peek2() == Some('=') => {
                self.bump();
                single(self, Tok::Ne)
            }
            '<' if self.peek2() == Some('=') => {
                self.bump();
                single(self, Tok::Le)
            }
            '>' if self.peek2() == Some('=') => {
                self.bump();
                single(self, Tok::Ge)
            }
            '<' => single(self, Tok::Lt),
            '>' => single(self, Tok::Gt),
            '"' => Ok(Token { tok: self.string(pos)?, pos }),
            '$' => {
                self.bump();
                match self.peek() {
                    Some(c) if c.is_ascii_lowercase() || c == '_' => Ok(Token { tok: Tok::Var(self.word()), pos }),
                    other => Err(Diagnostic::with_code(
                        pos,
                        "Q06",
                        format!(
                            "invalid variable: expected a lowercase letter or `_` after `$`, found {}",
                            describe_char(other)
                        ),
                    )),
                }
            }
            '@' => {
                self.bump();
                match self.peek() {
                    Some(c) if is_ident_start(c) => Ok(Token { tok: Tok::At(self.word()), pos }),
                    other => Err(Diagnostic::with_code(
                        pos,
                        "Q01",
                        format!(
                            "unexpected character `@`: expected an annotation name after `@`, found {}",
                            describe_char(other)
                        ),
                    )),
                }
            }
            c if c.is_ascii_digit() => Ok(Token { tok: self.number(pos)?, pos }),
            c if is_ident_start(c) => Ok(Token { tok: Tok::Ident(self.word()), pos }),
            '-' => Err(Diagnostic::with_code(
                pos,
                "Q01",
                "unexpected character `-`: negative numeric literals are not supported in `.gq`; pass the value as a parameter",
            )),
            other => Err(Diagnostic::with_code(
                pos,
                "Q01",
                format!(
                    "unexpected character {}: expected a token such as an identifier, `$variable`, literal or punctuation",
                    describe_char(Some(other))
                ),
            )),
        }
    }
}

fn describe_char(c: Option<char>) -> String {
    match c {
        None => "end of input".to_string(),
        Some(c) if c.is_whitespace() => "whitespace".to_string(),
        Some(c) => format!("`{}`", c.escape_debug()),
    }
}

/// Splits `src` into tokens; the last token is always [`Tok::Eof`].
pub(crate) fn tokenize(src: &str) -> Result<Vec<Token>, Diagnostic> {
    let mut lx = Lexer { chars: src.chars().peekable(), line: 1, column: 1 };
    let mut out = Vec::new();
    loop {
        let t = lx.next_token()?;
        let eof = t.tok == Tok::Eof;
        out.push(t);
        if eof {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn lexes_punctuation_and_words() {
        assert_eq!(
            toks("$a <knows> $_ >= <= != 1.5 2 \"x\\n\" @description // c\n /* b */ ?"),
            vec![
                Tok::Var("a".into()),
                Tok::Lt,
                Tok::Ident("knows".into()),
                Tok::Gt,
                Tok::Var("_".into()),
                Tok::Ge,
                Tok::Le,
                Tok::Ne,
                Tok::Float(1.5),
                Tok::Int(2),
                Tok::Str("x\n".into()),
                Tok::At("description".into()),
                Tok::Question,
                Tok::Eof
            ]
        );
    }

    #[test]
    fn positions_match_pos_at() {
        let src = "query a() {\n  match { $p: Person }\n\t/* é */ return { $p }\n}";
        let chars: Vec<(usize, char)> = src.char_indices().collect();
        for t in tokenize(src).unwrap() {
            if t.tok == Tok::Eof {
                continue;
            }
            let off = chars.iter().find(|(i, _)| Pos::at(src, *i) == t.pos).map(|(i, _)| *i);
            assert!(off.is_some(), "{t:?}");
        }
        assert_eq!(tokenize(src).unwrap()[7].pos, Pos { line: 2, column: 11 });
    }

    #[test]
    fn unicode_escape() {
        assert_eq!(toks(r#""\u{e9}""#)[0], Tok::Str("é".into()));
    }
}
