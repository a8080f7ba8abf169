//! Recursive-descent parser from tokens to [`Query`] values.
//!
//! Keywords are contextual: `match`, `return`, `count`, `date`, … are plain
//! identifiers to the lexer, so they remain usable as property names. All
//! recursion (nested `not { }`, lists and call arguments) goes through
//! a depth counter, which fails with `Q23` past [`MAX_DEPTH`] levels.

use super::ast::*;
use super::lexer::{Tok, Token, tokenize};
use crate::lang::diag::{Diagnostic, Pos};
use std::collections::HashSet;

/// Maximum nesting of `not { }` blocks, list literals and call arguments.
pub const MAX_DEPTH: usize = 64;

static EOF_TOK: Tok = Tok::Eof;

/// Parses every `query` declaration in `src`, stopping at the first error.
pub fn parse_queries(src: &str) -> Result<Vec<Query>, Diagnostic> {
    let toks = tokenize(src)?;
    let mut p = Parser { toks, idx: 0, depth: 0 };
    p.file()
}

struct Parser {
    toks: Vec<Token>,
    idx: usize,
    depth: usize,
}

fn err(pos: Pos, code: &str, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::with_code(pos, code, msg)
}

fn is_lower_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
}

fn is_type_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase())
}

fn cmp_op(t: &Tok) -> Option<FilterOp> {
    Some(match t {
        Tok::Eq => FilterOp::Eq,
        Tok::Ne => FilterOp::Ne,
        Tok::Gt => FilterOp::Gt,
        Tok::Ge => FilterOp::Ge,
        Tok::Lt => FilterOp::Lt,
        Tok::Le => FilterOp::Le,
        _ => return None,
    })
}

fn filter_op(t: &Tok) -> Option<FilterOp> {
    match t {
        Tok::Ident(s) if s == "contains" => Some(FilterOp::Contains),
        Tok::Ident(s) if s == "starts_with" => Some(FilterOp::StartsWith),
        other => cmp_op(other),
    }
}

fn agg_func(s: &str) -> Option<AggFunc> {
    Some(match s {
        "count" => AggFunc::Count,
        "sum" => AggFunc::Sum,
        "avg" => AggFunc::Avg,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        _ => return None,
    })
}

fn describe_expr(e: &ExprKind) -> &'static str {
    match e {
        ExprKind::Literal(_) => "a literal",
        ExprKind::Var(_) => "a variable",
        ExprKind::Prop(_) => "a property access",
        ExprKind::Alias(_) => "an identifier",
        ExprKind::Now => "`now()`",
        ExprKind::Agg { .. } => "an aggregate call",
        ExprKind::Nearest { .. } => "a `nearest(…)` call",
        ExprKind::Search { .. } => "a `search(…)` call",
        ExprKind::Fuzzy { .. } => "a `fuzzy(…)` call",
        ExprKind::MatchText { .. } => "a `match_text(…)` call",
        ExprKind::Bm25 { .. } => "a `bm25(…)` call",
        ExprKind::Rrf { .. } => "an `rrf(…)` call",
    }
}

impl Parser {
    // ----- token access -------------------------------------------------

    fn tok_at(&self, n: usize) -> &Tok {
        self.toks.get(self.idx.saturating_add(n)).map_or(&EOF_TOK, |t| &t.tok)
    }

    fn tok(&self) -> &Tok {
        self.tok_at(0)
    }

    fn pos(&self) -> Pos {
        self.toks.get(self.idx).or_else(|| self.toks.last()).map_or(Pos { line: 1, column: 1 }, |t| t.pos)
    }

    fn bump(&mut self) {
        if self.idx < self.toks.len() {
            self.idx += 1;
        }
    }

    fn found(&self) -> String {
        self.tok().describe()
    }

    fn is_word(&self, n: usize, w: &str) -> bool {
        matches!(self.tok_at(n), Tok::Ident(s) if s == w)
    }

    /// Consumes `want` or fails with `Q08` saying what it was for.
    fn expect(&mut self, want: Tok, what: &str) -> Result<Pos, Diagnostic> {
        if *self.tok() == want {
            let pos = self.pos();
            self.bump();
            Ok(pos)
        } else {
            Err(err(self.pos(), "Q08", format!("expected {} {what}, found {}", want.describe(), self.found())))
        }
    }

    /// Consumes the keyword `kw` or fails with `Q08`.
    fn expect_word(&mut self, kw: &str, what: &str) -> Result<Pos, Diagnostic> {
        if self.is_word(0, kw) {
            let pos = self.pos();
            self.bump();
            Ok(pos)
        } else {
            Err(err(self.pos(), "Q08", format!("expected `{kw}` {what}, found {}", self.found())))
        }
    }

    /// A lowercase identifier (`Q09`).
    fn expect_ident(&mut self, what: &str) -> Result<Name, Diagnostic> {
        match self.tok() {
            Tok::Ident(s) if is_lower_ident(s) => {
                let n = Name { name: s.clone(), pos: self.pos() };
                self.bump();
                Ok(n)
            }
            _ => Err(err(
                self.pos(),
                "Q09",
                format!(
                    "expected {what} (an identifier starting with a lowercase letter or `_`), found {}",
                    self.found()
                ),
            )),
        }
    }

    /// A capitalised type name (`Q10`).
    fn expect_type_name(&mut self, what: &str) -> Result<Name, Diagnostic> {
        match self.tok() {
            Tok::Ident(s) if is_type_name(s) => {
                let n = Name { name: s.clone(), pos: self.pos() };
                self.bump();
                Ok(n)
            }
            _ => Err(err(
                self.pos(),
                "Q10",
                format!("expected {what} (a type name starting with an uppercase letter), found {}", self.found()),
            )),
        }
    }

    fn expect_var(&mut self, what: &str) -> Result<Var, Diagnostic> {
        match self.tok() {
            Tok::Var(s) => {
                let v = Var { name: s.clone(), pos: self.pos() };
                self.bump();
                Ok(v)
            }
            _ => Err(err(self.pos(), "Q08", format!("expected {what} (a `$variable`), found {}", self.found()))),
        }
    }

    fn expect_int(&mut self, what: &str) -> Result<(u64, Pos), Diagnostic> {
        match self.tok() {
            Tok::Int(n) => {
                let r = (*n, self.pos());
                self.bump();
                Ok(r)
            }
            _ => Err(err(self.pos(), "Q27", format!("expected {what} (an unsigned integer), found {}", self.found()))),
        }
    }

    fn enter(&mut self) -> Result<(), Diagnostic> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(err(
                self.pos(),
                "Q23",
                format!(
                    "nesting is too deep: expected at most {MAX_DEPTH} levels of `not {{ }}`, lists or call arguments, found more"
                ),
            ))
        } else {
            Ok(())
        }
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    // ----- file and declaration ----------------------------------------

    fn file(&mut self) -> Result<Vec<Query>, Diagnostic> {
        let mut out: Vec<Query> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while *self.tok() != Tok::Eof {
            if !self.is_word(0, "query") {
                return Err(err(
                    self.pos(),
                    "Q07",
                    format!("expected `query` to start a declaration, found {}", self.found()),
                ));
            }
            let q = self.query()?;
            if !seen.insert(q.name.clone()) {
                return Err(err(
                    q.name_pos,
                    "Q24",
                    format!("duplicate query name `{}`: expected each query in a file to have a unique name", q.name),
                ));
            }
            out.push(q);
        }
        Ok(out)
    }

    fn query(&mut self) -> Result<Query, Diagnostic> {
        let pos = self.pos();
        self.bump(); // `query`
        let name = self.expect_ident("a query name after `query`")?;
        self.expect(Tok::LParen, &format!("after query name `{}`", name.name))?;
        let mut params: Vec<Param> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        if *self.tok() != Tok::RParen {
            loop {
                let p = self.param()?;
                if !seen.insert(p.name.clone()) {
                    return Err(err(
                        p.pos,
                        "Q25",
                        format!(
                            "duplicate parameter `${}` in query `{}`: expected unique parameter names",
                            p.name, name.name
                        ),
                    ));
                }
                params.push(p);
                if *self.tok() == Tok::Comma {
                    self.bump();
                } else {
                    break;
                }
            }
        }
        self.expect(Tok::RParen, "to close the parameter list (or `,` between parameters)")?;
        let mut description = None;
        let mut instruction = None;
        while let Tok::At(a) = self.tok() {
            let a = a.clone();
            let apos = self.pos();
            let slot = match a.as_str() {
                "description" => &mut description,
                "instruction" => &mut instruction,
                _ => {
                    return Err(err(
                        apos,
                        "Q12",
                        format!(
                            "unknown query annotation `@{a}`: expected `@description(\"…\")` or `@instruction(\"…\")`"
                        ),
                    ));
                }
            };
            if slot.is_some() {
                return Err(err(
                    apos,
                    "Q12",
                    format!("duplicate annotation `@{a}` on query `{}`: expected at most one", name.name),
                ));
            }
            self.bump();
            self.expect(Tok::LParen, &format!("after `@{a}`"))?;
            let text = match self.tok() {
                Tok::Str(s) => s.clone(),
                _ => {
                    return Err(err(
                        self.pos(),
                        "Q08",
                        format!("expected a string literal in `@{a}(…)`, found {}", self.found()),
                    ));
                }
            };
            self.bump();
            *slot = Some(text);
            self.expect(Tok::RParen, &format!("to close `@{a}(…)`"))?;
        }
        self.expect(Tok::LBrace, &format!("to open the body of query `{}`", name.name))?;
        let body = self.body(&name.name)?;
        self.expect(Tok::RBrace, &format!("to close query `{}`", name.name))?;
        Ok(Query { name: name.name, pos, name_pos: name.pos, params, description, instruction, body })
    }

    fn param(&mut self) -> Result<Param, Diagnostic> {
        let var = self.expect_var("a parameter")?;
        self.expect(Tok::Colon, &format!("after parameter `${}`", var.name))?;
        let ty = self.param_type()?;
        Ok(Param { name: var.name, pos: var.pos, ty })
    }

    fn base_type(&mut self) -> Result<BaseType, Diagnostic> {
        let bad = |p: &Self| {
            err(
                p.pos(),
                "Q11",
                format!(
                    "expected a parameter type (String, Blob, Bool, I32, I64, U32, U64, F32, F64, DateTime, Date, [T] or Vector(N)), found {}",
                    p.found()
                ),
            )
        };
        match self.tok() {
            Tok::Ident(s) => match BaseType::from_name(s) {
                Some(b) => {
                    self.bump();
                    Ok(b)
                }
                None => Err(bad(self)),
            },
            _ => Err(bad(self)),
        }
    }

    fn param_type(&mut self) -> Result<ParamType, Diagnostic> {
        let pos = self.pos();
        let kind = if *self.tok() == Tok::LBracket {
            self.bump();
            let b = self.base_type()?;
            self.expect(Tok::RBracket, "to close the list type")?;
            ParamTypeKind::List(b)
        } else if self.is_word(0, "Vector") {
            self.bump();
            self.expect(Tok::LParen, "after `Vector`")?;
            let (n, npos) = self.expect_int("a vector dimension")?;
            let n = u32::try_from(n).map_err(|_| {
                err(npos, "Q05", format!("vector dimension {n} is out of range: expected at most {}", u32::MAX))
            })?;
            self.expect(Tok::RParen, "to close `Vector(…)`")?;
            ParamTypeKind::Vector(n)
        } else {
            ParamTypeKind::Scalar(self.base_type()?)
        };
        let nullable = *self.tok() == Tok::Question;
        if nullable {
            self.bump();
        }
        Ok(ParamType { kind, nullable, pos })
    }

    fn body(&mut self, qname: &str) -> Result<QueryBody, Diagnostic> {
        match self.tok() {
            Tok::Ident(s) if s == "match" => Ok(QueryBody::Read(self.read_body(qname)?)),
            Tok::Ident(s) if matches!(s.as_str(), "insert" | "update" | "delete") => {
                Ok(QueryBody::Mutation(self.mutations(qname)?))
            }
            _ => Err(err(
                self.pos(),
                "Q13",
                format!(
                    "expected the body of query `{qname}` to start with `match`, `insert`, `update` or `delete`, found {}",
                    self.found()
                ),
            )),
        }
    }

    // ----- read queries -------------------------------------------------

    fn read_body(&mut self, qname: &str) -> Result<ReadQuery, Diagnostic> {
        let match_pos = self.pos();
        self.bump(); // `match`
        self.expect(Tok::LBrace, "after `match`")?;
        let clauses = self.clause_block("match")?;
        let return_pos = self.expect_word("return", "after the `match { }` block")?;
        self.expect(Tok::LBrace, "after `return`")?;
        let mut projections = Vec::new();
        while *self.tok() != Tok::RBrace {
            projections.push(self.projection()?);
        }
        if projections.is_empty() {
            return Err(err(
                self.pos(),
                "Q14",
                format!("empty `return {{ }}` in query `{qname}`: expected at least one projection"),
            ));
        }
        self.bump(); // `}`
        let order = if self.is_word(0, "order") { Some(self.order()?) } else { None };
        let limit = if self.is_word(0, "limit") {
            let pos = self.pos();
            self.bump();
            let (value, _) = self.expect_int("a row count after `limit`")?;
            Some(Limit { value, pos })
        } else {
            None
        };
        Ok(ReadQuery { match_pos, clauses, return_pos, projections, order, limit })
    }

    /// Clauses up to and including the closing `}` (the `{` is consumed).
    fn clause_block(&mut self, what: &str) -> Result<Vec<Clause>, Diagnostic> {
        let mut clauses = Vec::new();
        while *self.tok() != Tok::RBrace {
            if *self.tok() == Tok::Eof {
                return Err(err(self.pos(), "Q08", format!("expected `}}` to close `{what} {{`, found end of input")));
            }
            self.clause(&mut clauses)?;
        }
        if clauses.is_empty() {
            return Err(err(self.pos(), "Q14", format!("empty `{what} {{ }}` block: expected at least one clause")));
        }
        self.bump();
        Ok(clauses)
    }

    /// True when the tokens at `n…` continue a traversal: an edge
    /// (`name`, `<name>` or `$w:name`) followed by bounds or a variable.
    /// With `strict`, `$w:` must be followed by a lowercase edge name (so a
    /// following binding `$w: Type` is not taken for an edge binding).
    fn edge_follows(&self, n: usize, strict: bool) -> bool {
        match self.tok_at(n) {
            Tok::Lt => matches!(self.tok_at(n + 1), Tok::Ident(_)) && *self.tok_at(n + 2) == Tok::Gt,
            // `$w:edge` or, bound and undirected, `$w:<edge>`.
            Tok::Var(_) => {
                *self.tok_at(n + 1) == Tok::Colon
                    && (matches!(self.tok_at(n + 2), Tok::Ident(s) if !strict || is_lower_ident(s))
                        || self.edge_follows(n + 2, strict) && *self.tok_at(n + 2) == Tok::Lt)
            }
            Tok::Ident(s) => {
                !matches!(s.as_str(), "not" | "true" | "false")
                    && matches!(self.tok_at(n + 1), Tok::Var(_) | Tok::LBrace)
            }
            _ => false,
        }
    }

    fn clause(&mut self, out: &mut Vec<Clause>) -> Result<(), Diagnostic> {
        let pos = self.pos();
        match self.tok() {
            Tok::Ident(s) if s == "not" && *self.tok_at(1) == Tok::LBrace => {
                self.bump();
                self.bump();
                self.enter()?;
                let clauses = self.clause_block("not")?;
                self.leave();
                out.push(Clause::Not(NotClause { clauses, pos }));
                Ok(())
            }
            Tok::Var(_) if *self.tok_at(1) == Tok::Colon => {
                out.push(Clause::Binding(self.binding()?));
                Ok(())
            }
            Tok::Var(_) if self.edge_follows(1, false) => self.traversal(out),
            Tok::Var(_) | Tok::Str(_) | Tok::Int(_) | Tok::Float(_) | Tok::LBracket | Tok::Ident(_) => {
                if self.is_word(0, "not") {
                    return Err(err(
                        self.pos(),
                        "Q08",
                        format!("expected `{{` after `not`, found {}", self.tok_at(1).describe()),
                    ));
                }
                let left = self.expr()?;
                let Some(op) = filter_op(self.tok()) else {
                    if matches!(
                        left.kind,
                        ExprKind::Search { .. } | ExprKind::Fuzzy { .. } | ExprKind::MatchText { .. }
                    ) {
                        out.push(Clause::TextSearch(left));
                        return Ok(());
                    }
                    return Err(err(
                        self.pos(),
                        "Q18",
                        format!(
                            "expected a filter operator (= != > >= < <= contains starts_with) after {} in `match`, found {}",
                            describe_expr(&left.kind),
                            self.found()
                        ),
                    ));
                };
                let op_pos = self.pos();
                self.bump();
                let right = self.expr()?;
                out.push(Clause::Filter(Filter { left, op, op_pos, right, pos }));
                Ok(())
            }
            _ => Err(err(
                pos,
                "Q15",
                format!(
                    "expected a match clause (binding `$x: Type`, traversal `$a edge $b`, filter, `not {{ }}` or text search), found {}",
                    self.found()
                ),
            )),
        }
    }

    fn binding(&mut self) -> Result<Binding, Diagnostic> {
        let var = self.expect_var("a variable")?;
        self.bump(); // `:`
        let type_name = self.expect_type_name(&format!("a node type after `${}:`", var.name))?;
        let mut props = Vec::new();
        if *self.tok() == Tok::LBrace {
            self.bump();
            loop {
                if *self.tok() == Tok::RBrace {
                    break;
                }
                let prop = self.expect_ident("a property name")?;
                self.expect(Tok::Colon, &format!("after property `{}`", prop.name))?;
                let value = self.value(&prop.name)?;
                props.push(PropMatch { pos: prop.pos, prop, value });
                if *self.tok() == Tok::Comma {
                    self.bump();
                } else {
                    break;
                }
            }
            if props.is_empty() {
                return Err(err(
                    self.pos(),
                    "Q14",
                    format!(
                        "empty property block on `${}: {}`: expected at least one `prop: value` (or drop the braces)",
                        var.name, type_name.name
                    ),
                ));
            }
            self.expect(Tok::RBrace, "to close the property block (or `,` between properties)")?;
        }
        Ok(Binding { pos: var.pos, var, type_name, props })
    }

    fn traversal(&mut self, out: &mut Vec<Clause>) -> Result<(), Diagnostic> {
        let mut src = self.expect_var("a source variable")?;
        loop {
            let hop = self.hop(src)?;
            src = hop.dst.clone();
            out.push(Clause::Traversal(hop));
            if !self.edge_follows(0, true) {
                return Ok(());
            }
        }
    }

    fn hop(&mut self, src: Var) -> Result<Traversal, Diagnostic> {
        let edge_var = if let Tok::Var(_) = self.tok() {
            let v = self.expect_var("an edge variable")?;
            self.bump(); // `:`
            Some(v)
        } else {
            None
        };
        let undirected = *self.tok() == Tok::Lt;
        if undirected {
            self.bump();
        }
        let edge = match self.tok() {
            Tok::Ident(s) if is_lower_ident(s) && s != "not" => Name { name: s.clone(), pos: self.pos() },
            _ => {
                return Err(err(
                    self.pos(),
                    "Q16",
                    format!(
                        "expected an edge name starting with a lowercase letter (e.g. `worksAt` for edge `WorksAt`), found {}",
                        self.found()
                    ),
                ));
            }
        };
        self.bump();
        if undirected {
            self.expect(Tok::Gt, &format!("to close undirected edge `<{}`", edge.name))?;
        }
        let hops = if *self.tok() == Tok::LBrace {
            let pos = self.pos();
            self.bump();
            let (min, _) = self.expect_int("a minimum hop count in `{min,max}`")?;
            self.expect(Tok::Comma, "after the minimum hop count in `{min,max}`")?;
            let max = if let Tok::Int(n) = self.tok() {
                let n = *n;
                self.bump();
                Some(n)
            } else {
                None
            };
            self.expect(Tok::RBrace, "to close the hop bounds `{min,max}`")?;
            Some(HopBounds { min, max, pos })
        } else {
            None
        };
        let dst = self.expect_var(&format!("a destination variable after edge `{}`", edge.name))?;
        Ok(Traversal { pos: src.pos, src, edge_var, edge, undirected, hops, dst })
    }

    fn projection(&mut self) -> Result<Projection, Diagnostic> {
        if *self.tok() == Tok::Eof {
            return Err(err(self.pos(), "Q08", "expected `}` to close `return {`, found end of input"));
        }
        let expr = self.expr()?;
        let alias = if self.is_word(0, "as") {
            self.bump();
            Some(self.expect_ident("an alias after `as`")?)
        } else {
            None
        };
        if *self.tok() == Tok::Comma {
            self.bump();
        }
        Ok(Projection { pos: expr.pos, expr, alias })
    }

    fn order(&mut self) -> Result<OrderClause, Diagnostic> {
        let pos = self.pos();
        self.bump(); // `order`
        self.expect(Tok::LBrace, "after `order`")?;
        if *self.tok() == Tok::RBrace {
            return Err(err(self.pos(), "Q14", "empty `order { }`: expected at least one ordering"));
        }
        let mut items = Vec::new();
        loop {
            let expr = self.expr()?;
            let direction = if self.is_word(0, "asc") {
                self.bump();
                Some(Direction::Asc)
            } else if self.is_word(0, "desc") {
                self.bump();
                Some(Direction::Desc)
            } else {
                None
            };
            items.push(Ordering { pos: expr.pos, expr, direction });
            match self.tok() {
                Tok::Comma => self.bump(),
                Tok::RBrace => {
                    self.bump();
                    return Ok(OrderClause { items, pos });
                }
                _ => {
                    return Err(err(
                        self.pos(),
                        "Q08",
                        format!("expected `,`, `asc`, `desc` or `}}` in `order {{ }}`, found {}", self.found()),
                    ));
                }
            }
        }
    }

    // ----- expressions --------------------------------------------------

    fn expr(&mut self) -> Result<Expr, Diagnostic> {
        self.enter()?;
        let r = self.expr_inner();
        self.leave();
        r
    }

    fn expr_inner(&mut self) -> Result<Expr, Diagnostic> {
        let pos = self.pos();
        let lit = |l: Literal| Ok(Expr { kind: ExprKind::Literal(l), pos });
        match self.tok().clone() {
            Tok::Var(name) => {
                self.bump();
                let var = Var { name, pos };
                if *self.tok() == Tok::Dot {
                    self.bump();
                    let prop = self.expect_ident(&format!("a property name after `${}.`", var.name))?;
                    Ok(Expr { kind: ExprKind::Prop(PropRef { var, prop }), pos })
                } else {
                    Ok(Expr { kind: ExprKind::Var(var), pos })
                }
            }
            Tok::Str(s) => {
                self.bump();
                lit(Literal::String(s))
            }
            Tok::Int(n) => {
                self.bump();
                lit(Literal::Int(n))
            }
            Tok::Float(f) => {
                self.bump();
                lit(Literal::Float(f))
            }
            Tok::LBracket => {
                self.bump();
                let mut items = Vec::new();
                if *self.tok() != Tok::RBracket {
                    loop {
                        let e = self.expr()?;
                        if !matches!(e.kind, ExprKind::Literal(_)) {
                            return Err(err(
                                e.pos,
                                "Q21",
                                format!("expected a literal as a list element, found {}", describe_expr(&e.kind)),
                            ));
                        }
                        items.push(e);
                        if *self.tok() == Tok::Comma {
                            self.bump();
                        } else {
                            break;
                        }
                    }
                }
                self.expect(Tok::RBracket, "to close the list (or `,` between elements)")?;
                lit(Literal::List(items))
            }
            Tok::Ident(s) if s == "true" || s == "false" => {
                self.bump();
                lit(Literal::Bool(s == "true"))
            }
            Tok::Ident(s) if *self.tok_at(1) == Tok::LParen => self.call(&s, pos),
            Tok::Ident(s) if is_lower_ident(&s) => {
                self.bump();
                Ok(Expr { kind: ExprKind::Alias(Name { name: s, pos }), pos })
            }
            _ => Err(err(
                pos,
                "Q17",
                format!(
                    "expected an expression (literal, `$var`, `$var.prop`, function call or alias), found {}",
                    self.found()
                ),
            )),
        }
    }

    /// Parses `(` args `)` with between `min` and `max` arguments.
    fn args(&mut self, f: &str, min: usize, max: usize) -> Result<Vec<Expr>, Diagnostic> {
        self.expect(Tok::LParen, &format!("after `{f}`"))?;
        let mut args = Vec::new();
        let arity = if min == max { format!("{min}") } else { format!("{min} or {max}") };
        while args.len() < max {
            if args.len() >= min && *self.tok() == Tok::RParen {
                break;
            }
            if !args.is_empty() {
                self.expect(Tok::Comma, &format!("between arguments of `{f}` (it takes {arity})"))?;
            }
            args.push(self.expr()?);
        }
        self.expect(Tok::RParen, &format!("to close `{f}(…)` (it takes {arity} arguments)"))?;
        Ok(args)
    }

    fn call(&mut self, f: &str, pos: Pos) -> Result<Expr, Diagnostic> {
        self.bump(); // name
        let mk = |kind| Ok(Expr { kind, pos });
        let take2 = |mut a: Vec<Expr>| {
            let second = a.pop();
            let first = a.pop();
            match (first, second) {
                (Some(x), Some(y)) => Some((Box::new(x), Box::new(y))),
                _ => None,
            }
        };
        let internal = || err(pos, "Q17", format!("expected arguments for `{f}(…)`, found too few"));
        match f {
            "now" => {
                self.args(f, 0, 0)?;
                mk(ExprKind::Now)
            }
            "date" | "datetime" => {
                self.expect(Tok::LParen, &format!("after `{f}`"))?;
                let Tok::Str(s) = self.tok().clone() else {
                    return Err(err(
                        self.pos(),
                        "Q08",
                        format!("expected a string literal in `{f}(…)`, found {}", self.found()),
                    ));
                };
                self.bump();
                self.expect(Tok::RParen, &format!("to close `{f}(…)`"))?;
                mk(ExprKind::Literal(if f == "date" { Literal::Date(s) } else { Literal::DateTime(s) }))
            }
            "count" | "sum" | "avg" | "min" | "max" => {
                let func = agg_func(f).ok_or_else(internal)?;
                let mut a = self.args(f, 1, 1)?;
                let arg = a.pop().ok_or_else(internal)?;
                mk(ExprKind::Agg { func, arg: Box::new(arg) })
            }
            "nearest" => {
                let a = self.args(f, 2, 2)?;
                let (prop, query) = take2(a).ok_or_else(internal)?;
                let ExprKind::Prop(prop) = prop.kind else {
                    return Err(err(
                        prop.pos,
                        "Q20",
                        format!(
                            "expected `$var.prop` as the first argument of `nearest`, found {}",
                            describe_expr(&prop.kind)
                        ),
                    ));
                };
                mk(ExprKind::Nearest { prop, query })
            }
            "search" | "match_text" | "bm25" => {
                let a = self.args(f, 2, 2)?;
                let (field, query) = take2(a).ok_or_else(internal)?;
                mk(match f {
                    "search" => ExprKind::Search { field, query },
                    "match_text" => ExprKind::MatchText { field, query },
                    _ => ExprKind::Bm25 { field, query },
                })
            }
            "fuzzy" => {
                let mut a = self.args(f, 2, 3)?;
                let max_edits = if a.len() == 3 { a.pop().map(Box::new) } else { None };
                let (field, query) = take2(a).ok_or_else(internal)?;
                mk(ExprKind::Fuzzy { field, query, max_edits })
            }
            "rrf" => {
                let mut a = self.args(f, 2, 3)?;
                let k = if a.len() == 3 { a.pop().map(Box::new) } else { None };
                let (first, second) = take2(a).ok_or_else(internal)?;
                for r in [&first, &second] {
                    if !matches!(r.kind, ExprKind::Nearest { .. } | ExprKind::Bm25 { .. }) {
                        return Err(err(
                            r.pos,
                            "Q19",
                            format!(
                                "expected `nearest(…)` or `bm25(…)` as a ranking argument of `rrf`, found {}",
                                describe_expr(&r.kind)
                            ),
                        ));
                    }
                }
                mk(ExprKind::Rrf { first, second, k })
            }
            _ => Err(err(
                pos,
                "Q26",
                format!(
                    "unknown function `{f}`: expected one of now, date, datetime, count, sum, avg, min, max, nearest, search, fuzzy, match_text, bm25, rrf"
                ),
            )),
        }
    }

    /// A value position: literal, `$var` or `now()` (`Q21` otherwise).
    fn value(&mut self, prop: &str) -> Result<Expr, Diagnostic> {
        let e = self.expr()?;
        match e.kind {
            ExprKind::Literal(_) | ExprKind::Var(_) | ExprKind::Now => Ok(e),
            ref other => Err(err(
                e.pos,
                "Q21",
                format!(
                    "expected a literal, `$param` or `now()` as the value of `{prop}`, found {}",
                    describe_expr(other)
                ),
            )),
        }
    }

    // ----- mutations ----------------------------------------------------

    fn mutations(&mut self, qname: &str) -> Result<Vec<Mutation>, Diagnostic> {
        let mut stmts: Vec<Mutation> = Vec::new();
        loop {
            match self.tok() {
                Tok::Ident(s) if matches!(s.as_str(), "insert" | "update" | "delete") => {
                    stmts.push(self.mutation()?);
                }
                Tok::RBrace => break,
                _ => {
                    return Err(err(
                        self.pos(),
                        "Q08",
                        format!(
                            "expected `insert`, `update`, `delete` or `}}` in mutation query `{qname}`, found {}",
                            self.found()
                        ),
                    ));
                }
            }
        }
        if let Some(first) = stmts.first() {
            let first_delete = first.is_delete();
            if let Some(bad) = stmts.iter().find(|m| m.is_delete() != first_delete) {
                return Err(err(
                    bad.pos,
                    "D2",
                    format!("query `{qname}` mixes insert/update with delete; split it into separate mutations (D₂)"),
                ));
            }
        }
        Ok(stmts)
    }

    fn mutation(&mut self) -> Result<Mutation, Diagnostic> {
        let pos = self.pos();
        let kw = match self.tok() {
            Tok::Ident(s) => s.clone(),
            _ => String::new(),
        };
        self.bump();
        let type_name = self.expect_type_name(&format!("a type name after `{kw}`"))?;
        let kind = match kw.as_str() {
            "insert" => MutationKind::Insert { assignments: self.assignments("insert", &type_name.name)? },
            "update" => {
                self.expect_word("set", &format!("after `update {}`", type_name.name))?;
                let assignments = self.assignments("update", &type_name.name)?;
                self.expect_word("where", &format!("after the `set {{ }}` block of `update {}`", type_name.name))?;
                MutationKind::Update { assignments, predicate: self.predicate()? }
            }
            _ => {
                self.expect_word("where", &format!("after `delete {}`", type_name.name))?;
                MutationKind::Delete { predicate: self.predicate()? }
            }
        };
        Ok(Mutation { kind, type_name, pos })
    }

    fn assignments(&mut self, kw: &str, ty: &str) -> Result<Vec<Assignment>, Diagnostic> {
        self.expect(Tok::LBrace, &format!("to open the assignments of `{kw} {ty}`"))?;
        let mut out = Vec::new();
        while *self.tok() != Tok::RBrace {
            let prop = self.expect_ident("a property name (or `}`)")?;
            self.expect(Tok::Colon, &format!("after property `{}`", prop.name))?;
            let value = self.value(&prop.name)?;
            out.push(Assignment { pos: prop.pos, prop, value });
            if *self.tok() == Tok::Comma {
                self.bump();
            }
        }
        if out.is_empty() {
            return Err(err(
                self.pos(),
                "Q14",
                format!("empty assignment block in `{kw} {ty}`: expected at least one `prop: value`"),
            ));
        }
        self.bump();
        Ok(out)
    }

    fn predicate(&mut self) -> Result<Predicate, Diagnostic> {
        let prop = self.expect_ident("a property name after `where`")?;
        let Some(op) = cmp_op(self.tok()) else {
            return Err(err(
                self.pos(),
                "Q22",
                format!(
                    "expected a comparison operator (= != > >= < <=) after `where {}`, found {}",
                    prop.name,
                    self.found()
                ),
            ));
        };
        self.bump();
        let value = self.value(&prop.name)?;
        Ok(Predicate { pos: prop.pos, prop, op, value })
    }
}
