//! Recursive-descent parser: tokens → [`super::ast::Schema`].
//!
//! Only syntax (and checks that need nothing but the token at hand, such as
//! name casing) happens here; cross-declaration rules live in the catalog
//! compiler so they can see every declaration at once.

use super::ast::{
    AnnArg, Annotation, BaseType, CardDecl, Constraint, ConstraintKind, CoreType, Decl, EdgeDecl, InterfaceDecl,
    Literal, Name, NodeDecl, Number, PropDecl, Schema, TypeRef,
};
use super::codes;
use super::lexer::{Lexer, Token, TokenKind};
use crate::lang::diag::{Diagnostic, Pos};
use std::collections::VecDeque;

/// Constraint keywords: `@kw(` in a body is a constraint, not an annotation.
const CONSTRAINT_KEYWORDS: [&str; 5] = ["key", "unique", "index", "range", "check"];

/// Largest accepted `Vector(N)`: Arrow's FixedSizeList length is an i32.
const MAX_VECTOR_DIM: u32 = i32::MAX as u32;

/// Parses a whole `.pg` source.
pub fn parse(src: &str) -> Result<Schema, Diagnostic> {
    let mut p = Parser { lx: Lexer::new(src), ahead: VecDeque::new() };
    let mut decls = Vec::new();
    loop {
        let tok = p.peek(0)?;
        match &tok.kind {
            TokenKind::Eof => return Ok(Schema { decls }),
            TokenKind::Ident(kw) if kw == "interface" => decls.push(Decl::Interface(p.interface()?)),
            TokenKind::Ident(kw) if kw == "node" => decls.push(Decl::Node(p.node()?)),
            TokenKind::Ident(kw) if kw == "edge" => decls.push(Decl::Edge(p.edge()?)),
            other => {
                return Err(
                    p.syntax(tok.start, format!("expected `node`, `edge` or `interface`, found {}", other.describe()))
                );
            }
        }
    }
}

/// Positional and named annotation arguments.
type AnnArgs = (Vec<AnnArg>, Vec<(Name, AnnArg)>);

struct Parser<'a> {
    lx: Lexer<'a>,
    /// Lookahead buffer; at most three tokens (`@ key (`).
    ahead: VecDeque<Token>,
}

impl Parser<'_> {
    fn peek(&mut self, n: usize) -> Result<Token, Diagnostic> {
        while self.ahead.len() <= n {
            let t = self.lx.next_token()?;
            self.ahead.push_back(t);
        }
        match self.ahead.get(n) {
            Some(t) => Ok(t.clone()),
            None => Ok(Token { kind: TokenKind::Eof, start: 0 }),
        }
    }

    fn next(&mut self) -> Result<Token, Diagnostic> {
        match self.ahead.pop_front() {
            Some(t) => Ok(t),
            None => self.lx.next_token(),
        }
    }

    fn pos(&self, offset: usize) -> Pos {
        self.lx.pos(offset)
    }

    fn syntax(&self, offset: usize, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::with_code(self.pos(offset), codes::SYNTAX, msg)
    }

    fn err(&self, offset: usize, code: &str, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::with_code(self.pos(offset), code, msg)
    }

    /// Consumes `kind` or fails with "expected `x` <context>, found …".
    fn expect(&mut self, kind: TokenKind, context: &str) -> Result<Token, Diagnostic> {
        let tok = self.next()?;
        if tok.kind == kind {
            Ok(tok)
        } else {
            Err(self
                .syntax(tok.start, format!("expected {} {context}, found {}", kind.describe(), tok.kind.describe())))
        }
    }

    /// Consumes the next token if it is `kind`.
    fn eat(&mut self, kind: &TokenKind) -> Result<bool, Diagnostic> {
        if &self.peek(0)?.kind == kind {
            self.next()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn ident(&mut self, what: &str) -> Result<Name, Diagnostic> {
        let tok = self.next()?;
        match tok.kind {
            TokenKind::Ident(text) => Ok(Name { text, pos: self.pos(tok.start) }),
            other => Err(self.syntax(tok.start, format!("expected {what}, found {}", other.describe()))),
        }
    }

    fn type_name(&mut self, what: &str) -> Result<Name, Diagnostic> {
        let name = self.ident(what)?;
        if name.text.starts_with(|c: char| c.is_ascii_uppercase()) {
            Ok(name)
        } else {
            Err(Diagnostic::with_code(
                name.pos,
                codes::TYPE_NAME_CASE,
                format!("type name `{}` must start with an uppercase letter", name.text),
            ))
        }
    }

    fn prop_name(&mut self, what: &str) -> Result<Name, Diagnostic> {
        let name = self.ident(what)?;
        check_prop_case(&name)?;
        Ok(name)
    }

    fn interface(&mut self) -> Result<InterfaceDecl, Diagnostic> {
        self.next()?;
        let name = self.type_name("an interface name after `interface`")?;
        let ctx = format!("to open the body of interface `{}`", name.text);
        self.expect(TokenKind::LBrace, &ctx)?;
        let mut props = Vec::new();
        loop {
            let tok = self.peek(0)?;
            match tok.kind {
                TokenKind::RBrace => {
                    self.next()?;
                    return Ok(InterfaceDecl { name, props });
                }
                TokenKind::Ident(_) => props.push(self.prop()?),
                other => {
                    return Err(self.syntax(
                        tok.start,
                        format!("expected a property or `}}` in interface `{}`, found {}", name.text, other.describe()),
                    ));
                }
            }
        }
    }

    fn node(&mut self) -> Result<NodeDecl, Diagnostic> {
        self.next()?;
        let name = self.type_name("a node type name after `node`")?;
        let annotations = self.annotations()?;
        let mut implements = Vec::new();
        if matches!(&self.peek(0)?.kind, TokenKind::Ident(k) if k == "implements") {
            self.next()?;
            loop {
                implements.push(self.type_name("an interface name after `implements`")?);
                if !self.eat(&TokenKind::Comma)? {
                    break;
                }
            }
        }
        let ctx = format!("to open the body of node `{}`", name.text);
        self.expect(TokenKind::LBrace, &ctx)?;
        let (props, constraints) = self.body(&name)?;
        Ok(NodeDecl { name, annotations, implements, props, constraints })
    }

    fn edge(&mut self) -> Result<EdgeDecl, Diagnostic> {
        self.next()?;
        let name = self.type_name("an edge type name after `edge`")?;
        let ctx = format!("after edge name `{}`", name.text);
        self.expect(TokenKind::Colon, &ctx)?;
        let from = self.type_name("the source node type of the edge")?;
        let ctx = format!("after source type `{}`", from.text);
        self.expect(TokenKind::Arrow, &ctx)?;
        let to = self.type_name("the destination node type after `->`")?;
        let (card, annotations) = self.edge_annotations()?;
        let (props, constraints) =
            if self.eat(&TokenKind::LBrace)? { self.body(&name)? } else { (Vec::new(), Vec::new()) };
        Ok(EdgeDecl { name, from, to, card, annotations, props, constraints })
    }

    /// Edge header annotations; `@card(…)` is pulled out of the list.
    fn edge_annotations(&mut self) -> Result<(Option<CardDecl>, Vec<Annotation>), Diagnostic> {
        let mut card = None;
        let mut annotations = Vec::new();
        while self.peek(0)?.kind == TokenKind::At {
            if matches!(&self.peek(1)?.kind, TokenKind::Ident(n) if n == "card") {
                let at = self.peek(0)?.start;
                if card.is_some() {
                    return Err(self.err(
                        at,
                        codes::BAD_ANNOTATION,
                        "`@card` is given twice; an edge has one cardinality",
                    ));
                }
                card = Some(self.card()?);
            } else {
                annotations.push(self.annotation()?);
            }
        }
        Ok((card, annotations))
    }

    /// `@card(min..max?)`
    fn card(&mut self) -> Result<CardDecl, Diagnostic> {
        let at = self.next()?.start;
        let at_pos = self.pos(at);
        self.next()?;
        self.expect(TokenKind::LParen, "after `@card`")?;
        let min = self.card_bound("a minimum count in `@card(min..max)`")?;
        self.expect(TokenKind::DotDot, "between the bounds of `@card(min..max)`")?;
        let max = if self.peek(0)?.kind == TokenKind::RParen {
            None
        } else {
            Some(self.card_bound("a maximum count or `)` in `@card(min..max)`")?)
        };
        let close = self.expect(TokenKind::RParen, "to close `@card(`")?;
        if let Some(max) = max
            && min > max
        {
            return Err(self.err(
                close.start,
                codes::BAD_CARD,
                format!("`@card` minimum {min} is greater than its maximum {max}"),
            ));
        }
        Ok(CardDecl { min, max, pos: at_pos })
    }

    fn card_bound(&mut self, what: &str) -> Result<u32, Diagnostic> {
        let tok = self.next()?;
        match tok.kind {
            TokenKind::Int(text) => text.parse::<u32>().map_err(|_| {
                self.err(
                    tok.start,
                    codes::BAD_NUMBER,
                    format!("`@card` bound `{text}` must be a count from 0 to {}", u32::MAX),
                )
            }),
            other => Err(self.syntax(tok.start, format!("expected {what}, found {}", other.describe()))),
        }
    }

    /// `{ (prop | constraint)* }` after the `{`.
    fn body(&mut self, owner: &Name) -> Result<(Vec<PropDecl>, Vec<Constraint>), Diagnostic> {
        let mut props = Vec::new();
        let mut constraints = Vec::new();
        loop {
            let tok = self.peek(0)?;
            match tok.kind {
                TokenKind::RBrace => {
                    self.next()?;
                    return Ok((props, constraints));
                }
                TokenKind::Ident(_) => props.push(self.prop()?),
                TokenKind::At if self.at_constraint()? => constraints.push(self.constraint()?),
                TokenKind::At => {
                    let name = self.peek(1)?;
                    return Err(self.syntax(
                        tok.start,
                        format!(
                            "expected a property or a constraint (@key, @unique, @index, @range, @check with arguments) in `{}`, found `@` {}",
                            owner.text,
                            name.kind.describe()
                        ),
                    ));
                }
                other => {
                    return Err(self.syntax(
                        tok.start,
                        format!(
                            "expected a property, a constraint or `}}` in `{}`, found {}",
                            owner.text,
                            other.describe()
                        ),
                    ));
                }
            }
        }
    }

    /// Whether the lookahead is `@kw(` for a constraint keyword.
    fn at_constraint(&mut self) -> Result<bool, Diagnostic> {
        let is_kw = matches!(&self.peek(1)?.kind, TokenKind::Ident(n) if CONSTRAINT_KEYWORDS.contains(&n.as_str()));
        Ok(self.peek(0)?.kind == TokenKind::At && is_kw && self.peek(2)?.kind == TokenKind::LParen)
    }

    /// `name: Type annotation*`
    fn prop(&mut self) -> Result<PropDecl, Diagnostic> {
        let name = self.prop_name("a property name")?;
        let ctx = format!("after property name `{}`", name.text);
        self.expect(TokenKind::Colon, &ctx)?;
        let ty = self.type_ref(&name)?;
        let mut annotations = Vec::new();
        while self.peek(0)?.kind == TokenKind::At && !self.at_constraint()? {
            annotations.push(self.annotation()?);
        }
        Ok(PropDecl { name, ty, annotations })
    }

    fn type_ref(&mut self, prop: &Name) -> Result<TypeRef, Diagnostic> {
        let tok = self.next()?;
        let pos = self.pos(tok.start);
        let core = match tok.kind {
            TokenKind::LBracket => {
                let inner = self.next()?;
                let base = self.base_type(inner, "inside `[ ]` (lists hold scalar types)")?;
                self.expect(TokenKind::RBracket, "to close the list type")?;
                CoreType::List(base)
            }
            TokenKind::Ident(ref n) if n == "enum" => CoreType::Enum(self.enum_values()?),
            TokenKind::Ident(ref n) if n == "Vector" => CoreType::Vector(self.vector_dim()?),
            _ => {
                let ctx = format!("for property `{}`", prop.text);
                CoreType::Base(self.base_type(tok, &ctx)?)
            }
        };
        let nullable = self.eat(&TokenKind::Question)?;
        Ok(TypeRef { core, nullable, pos })
    }

    fn base_type(&mut self, tok: Token, context: &str) -> Result<BaseType, Diagnostic> {
        const EXPECTED: &str = "String, Blob, Bool, I32, I64, U32, U64, F32, F64, DateTime or Date";
        match &tok.kind {
            TokenKind::Ident(n) => BaseType::from_name(n).ok_or_else(|| {
                self.err(tok.start, codes::UNKNOWN_SCALAR, format!("unknown type `{n}` {context}; expected {EXPECTED}"))
            }),
            other => Err(self.syntax(tok.start, format!("expected a type {context}, found {}", other.describe()))),
        }
    }

    /// `( value (, value)* )` after `enum`, using the enum-value word shape.
    fn enum_values(&mut self) -> Result<Vec<Name>, Diagnostic> {
        self.expect(TokenKind::LParen, "after `enum`")?;
        let mut values: Vec<Name> = Vec::new();
        loop {
            let value = self.enum_value()?;
            if values.iter().any(|v| v.text == value.text) {
                return Err(Diagnostic::with_code(
                    value.pos,
                    codes::DUPLICATE_ENUM_VALUE,
                    format!("enum value `{}` is listed twice", value.text),
                ));
            }
            values.push(value);
            let tok = self.next()?;
            match tok.kind {
                TokenKind::Comma => {}
                TokenKind::RParen => return Ok(values),
                other => {
                    return Err(self.syntax(
                        tok.start,
                        format!("expected `,` or `)` after enum value, found {}", other.describe()),
                    ));
                }
            }
        }
    }

    fn enum_value(&mut self) -> Result<Name, Diagnostic> {
        if self.ahead.is_empty()
            && let Some((text, start)) = self.lx.enum_value()?
        {
            return Ok(Name { text, pos: self.pos(start) });
        }
        let tok = self.peek(0)?;
        Err(self.syntax(
            tok.start,
            format!("expected an enum value (letters, digits, `_` or `-`), found {}", tok.kind.describe()),
        ))
    }

    fn vector_dim(&mut self) -> Result<u32, Diagnostic> {
        self.expect(TokenKind::LParen, "after `Vector`")?;
        let tok = self.next()?;
        let dim = match tok.kind {
            TokenKind::Int(text) => match text.parse::<u32>() {
                Ok(d) if (1..=MAX_VECTOR_DIM).contains(&d) => d,
                _ => {
                    return Err(self.err(
                        tok.start,
                        codes::BAD_VECTOR_DIM,
                        format!("Vector dimension `{text}` must be between 1 and {MAX_VECTOR_DIM}"),
                    ));
                }
            },
            other => {
                return Err(
                    self.syntax(tok.start, format!("expected a dimension in `Vector(N)`, found {}", other.describe()))
                );
            }
        };
        self.expect(TokenKind::RParen, "to close `Vector(`")?;
        Ok(dim)
    }

    /// Annotations (not constraints) until the next non-`@` token.
    fn annotations(&mut self) -> Result<Vec<Annotation>, Diagnostic> {
        let mut out = Vec::new();
        while self.peek(0)?.kind == TokenKind::At {
            out.push(self.annotation()?);
        }
        Ok(out)
    }

    /// `@name` or `@name(arg, key = literal, …)`.
    fn annotation(&mut self) -> Result<Annotation, Diagnostic> {
        let at = self.next()?.start;
        let at_pos = self.pos(at);
        let name = self.ident("an annotation name after `@`")?;
        let (args, named) =
            if self.eat(&TokenKind::LParen)? { self.annotation_args(&name)? } else { (Vec::new(), Vec::new()) };
        Ok(Annotation { name, args, named, pos: at_pos })
    }

    /// `)` or `arg (, arg)* )` after the `(`; `key = literal` args are named.
    fn annotation_args(&mut self, name: &Name) -> Result<AnnArgs, Diagnostic> {
        let mut args = Vec::new();
        let mut named = Vec::new();
        if self.eat(&TokenKind::RParen)? {
            return Ok((args, named));
        }
        loop {
            if matches!(self.peek(0)?.kind, TokenKind::Ident(_)) && self.peek(1)?.kind == TokenKind::Eq {
                let key = self.ident("an argument name")?;
                self.next()?;
                named.push((key, self.literal()?));
            } else {
                args.push(self.literal()?);
            }
            let tok = self.next()?;
            match tok.kind {
                TokenKind::Comma => {}
                TokenKind::RParen => return Ok((args, named)),
                other => {
                    let msg =
                        format!("expected `,` or `)` in the arguments of `@{}`, found {}", name.text, other.describe());
                    return Err(self.syntax(tok.start, msg));
                }
            }
        }
    }

    fn literal(&mut self) -> Result<AnnArg, Diagnostic> {
        let tok = self.next()?;
        let pos = self.pos(tok.start);
        let value = match tok.kind {
            TokenKind::Str(s) => Literal::Str(s),
            TokenKind::Int(text) => Literal::Int(self.int(&text, tok.start)?),
            TokenKind::Float(text) => Literal::Float(self.float(&text, tok.start)?),
            TokenKind::Ident(s) if s == "true" => Literal::Bool(true),
            TokenKind::Ident(s) if s == "false" => Literal::Bool(false),
            TokenKind::Ident(s) => Literal::Ident(s),
            other => {
                return Err(
                    self.syntax(tok.start, format!("expected an annotation argument, found {}", other.describe()))
                );
            }
        };
        Ok(AnnArg { value, pos })
    }

    fn int(&self, text: &str, start: usize) -> Result<i64, Diagnostic> {
        text.parse::<i64>()
            .map_err(|_| self.err(start, codes::BAD_NUMBER, format!("integer `{text}` does not fit in 64 bits")))
    }

    fn float(&self, text: &str, start: usize) -> Result<f64, Diagnostic> {
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(f),
            _ => Err(self.err(start, codes::BAD_NUMBER, format!("number `{text}` is not a finite float"))),
        }
    }

    /// A body constraint; the lookahead is known to be `@kw(`.
    fn constraint(&mut self) -> Result<Constraint, Diagnostic> {
        let at = self.next()?.start;
        let at_pos = self.pos(at);
        let kw = self.ident("a constraint name")?;
        self.next()?;
        let kind = match kw.text.as_str() {
            "key" => ConstraintKind::Key(self.name_list(&kw.text)?),
            "unique" => ConstraintKind::Unique(self.name_list(&kw.text)?),
            "index" => ConstraintKind::Index(self.name_list(&kw.text)?),
            "range" => self.range_args()?,
            _ => self.check_args()?,
        };
        Ok(Constraint { kind, pos: at_pos })
    }

    /// `ident (, ident)* )` after the `(`.
    fn name_list(&mut self, kw: &str) -> Result<Vec<Name>, Diagnostic> {
        let mut names = Vec::new();
        loop {
            names.push(self.prop_name(&format!("a property name in `@{kw}(…)`"))?);
            let tok = self.next()?;
            match tok.kind {
                TokenKind::Comma => {}
                TokenKind::RParen => return Ok(names),
                other => {
                    return Err(self
                        .syntax(tok.start, format!("expected `,` or `)` in `@{kw}(…)`, found {}", other.describe())));
                }
            }
        }
    }

    /// `prop, N..M | N.. | ..M )` after the `(`.
    fn range_args(&mut self) -> Result<ConstraintKind, Diagnostic> {
        let prop = self.prop_name("a property name in `@range(prop, min..max)`")?;
        self.expect(TokenKind::Comma, "after the property in `@range(prop, min..max)`")?;
        let min = self.range_bound()?;
        let dots =
            self.expect(TokenKind::DotDot, "in the bounds of `@range` (write `min..max`, `min..` or `..max`)")?;
        let max = self.range_bound()?;
        if min.is_none() && max.is_none() {
            return Err(self.err(
                dots.start,
                codes::BAD_RANGE,
                "`@range` needs at least one bound: `min..max`, `min..` or `..max`",
            ));
        }
        self.expect(TokenKind::RParen, "to close `@range(`")?;
        Ok(ConstraintKind::Range { prop, min, max })
    }

    fn range_bound(&mut self) -> Result<Option<Number>, Diagnostic> {
        let tok = self.peek(0)?;
        let n = match &tok.kind {
            TokenKind::Int(text) => Number::Int(self.int(text, tok.start)?),
            TokenKind::Float(text) => Number::Float(self.float(text, tok.start)?),
            _ => return Ok(None),
        };
        self.next()?;
        Ok(Some(n))
    }

    /// `prop, "regex" )` after the `(`.
    fn check_args(&mut self) -> Result<ConstraintKind, Diagnostic> {
        let prop = self.prop_name("a property name in `@check(prop, \"regex\")`")?;
        self.expect(TokenKind::Comma, "after the property in `@check(prop, \"regex\")`")?;
        let tok = self.next()?;
        let TokenKind::Str(pattern) = tok.kind else {
            return Err(self.syntax(
                tok.start,
                format!("expected a regex string in `@check(prop, \"regex\")`, found {}", tok.kind.describe()),
            ));
        };
        let pattern_pos = self.pos(tok.start);
        self.expect(TokenKind::RParen, "to close `@check(`")?;
        Ok(ConstraintKind::Check { prop, pattern, pattern_pos })
    }
}

fn check_prop_case(name: &Name) -> Result<(), Diagnostic> {
    if name.text.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
        Ok(())
    } else {
        Err(Diagnostic::with_code(
            name.pos,
            codes::PROP_NAME_CASE,
            format!("property name `{}` must start with a lowercase letter or `_`", name.text),
        ))
    }
}
