//! The parser: text to [`Program`].
//!
//! Hand-written recursive descent rather than a parser crate: the grammar is four rules and
//! two precedence levels, a sign is part of a number only where an atom is expected (as in
//! pyparsing's `infix_notation` over `pyparsing_common.number`), and every error has to be one
//! sentence naming the character where reading stopped, which a combinator crate's error
//! reports would have to be rewritten into anyway.
//!
//! ```text
//! program    := statement*
//! statement  := IDENT '=' expr ';' | expr ';'
//! expr       := term (('+' | '-') term)*
//! term       := atom ('*' atom)*
//! atom       := NUMBER | '(' expr ')' | IDENT | call
//! call       := 'cw' '(' real ',' real ')' | 'comb' '(' real ',' real ')'
//!             | 'multicw' '(' int ',' real ',' real ',' real ',' real ')'
//!             | 'wgn' '(' real [',' int] ')' | 'delay' '(' expr ',' signed_int ')'
//!             | 'nodither' '(' expr ')'
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use super::{Expr, LangError, Num, Op, Program};

/// Reads `text` as a program; `fresh_entropy` gives the entropy of a `wgn` that names none.
pub fn parse(text: &str, fresh_entropy: &mut dyn FnMut() -> u128) -> Result<Program, LangError> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        vars: HashMap::new(),
        fresh_entropy,
    };
    let mut outputs = Vec::new();
    p.skip_ws();
    while p.pos < p.s.len() {
        let at = p.pos;
        if let Some(name) = p.assignment_target() {
            let e = p.expr()?;
            p.expect(b';', "';' after the expression")?;
            if p.vars.insert(name.clone(), e).is_some() {
                return Err(p.fail_at(
                    at,
                    &format!(
                        "variable '{name}' is defined twice; a variable can be defined only once"
                    ),
                ));
            }
        } else {
            let e = p.expr()?;
            p.expect(b';', "';' after the expression")?;
            outputs.push(e);
        }
        p.skip_ws();
    }
    Ok(Program {
        outputs,
        source: text.to_owned(),
    })
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    vars: HashMap<String, Arc<Expr>>,
    fresh_entropy: &'a mut dyn FnMut() -> u128,
}

const FUNCTIONS: [&str; 6] = ["cw", "multicw", "comb", "wgn", "delay", "nodither"];

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    /// What stands at `at`, for an error: a few characters, or the end.
    fn found(&self, at: usize) -> String {
        if at >= self.s.len() {
            return "the end of the spec".into();
        }
        let rest = String::from_utf8_lossy(&self.s[at..]);
        let word: String = rest.chars().take(12).collect();
        format!("'{word}'")
    }

    fn fail_at(&self, at: usize, what: &str) -> LangError {
        LangError(format!("at character {}: {what}.", at + 1))
    }

    fn expected(&mut self, what: &str) -> LangError {
        self.skip_ws();
        let found = self.found(self.pos);
        self.fail_at(self.pos, &format!("expected {what}, found {found}"))
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), LangError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_ws();
        let start = self.pos;
        let s = self.s;
        if start < s.len() && (s[start].is_ascii_alphabetic() || s[start] == b'_') {
            let mut end = start + 1;
            while end < s.len() && (s[end].is_ascii_alphanumeric() || s[end] == b'_') {
                end += 1;
            }
            self.pos = end;
            return Some(String::from_utf8_lossy(&s[start..end]).into_owned());
        }
        None
    }

    /// `IDENT '='` at the start of a statement: the name, with the position after the '='.
    fn assignment_target(&mut self) -> Option<String> {
        let save = self.pos;
        if let Some(name) = self.ident() {
            if self.peek() == Some(b'=') {
                self.pos += 1;
                return Some(name);
            }
        }
        self.pos = save;
        None
    }

    /// A number as pyparsing's `number` reads it: optional sign, digits with an optional point
    /// and exponent; an integer when it has neither.
    fn number(&mut self) -> Option<Num> {
        self.skip_ws();
        let s = self.s;
        let start = self.pos;
        let mut i = start;
        if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
            i += 1;
        }
        let digits = |mut i: usize| {
            while i < s.len() && s[i].is_ascii_digit() {
                i += 1;
            }
            i
        };
        let int_end = digits(i);
        let mut end = int_end;
        let mut float = false;
        if end < s.len() && s[end] == b'.' {
            let frac_end = digits(end + 1);
            if int_end > i || frac_end > end + 1 {
                end = frac_end;
                float = true;
            }
        }
        if end == i {
            return None;
        }
        if end < s.len() && (s[end] == b'e' || s[end] == b'E') {
            let mut j = end + 1;
            if j < s.len() && (s[j] == b'+' || s[j] == b'-') {
                j += 1;
            }
            let exp_end = digits(j);
            if exp_end > j {
                end = exp_end;
                float = true;
            }
        }
        let text = std::str::from_utf8(&s[start..end]).ok()?;
        let num = if float {
            Num::Float(text.parse().ok()?)
        } else {
            match text.parse::<i128>() {
                Ok(v) => Num::Int(v),
                Err(_) => Num::Float(text.parse().ok()?),
            }
        };
        self.pos = end;
        Some(num)
    }

    fn real(&mut self, what: &str) -> Result<f64, LangError> {
        let at = self.pos;
        match self.number() {
            Some(n) if n.value().is_finite() => Ok(n.value()),
            Some(_) => Err(self.fail_at(at, &format!("{what} is not a finite number"))),
            None => Err(self.expected(&format!("a number for {what}"))),
        }
    }

    /// A whole number of 0 or more, up to 2^128 - 1 (numpy's entropy is 128 bits).
    fn unsigned(&mut self, what: &str) -> Result<u128, LangError> {
        self.skip_ws();
        let at = self.pos;
        let s = self.s;
        let mut end = at;
        while end < s.len() && s[end].is_ascii_digit() {
            end += 1;
        }
        let fraction = matches!(s.get(end), Some(b'.' | b'e' | b'E'));
        match std::str::from_utf8(&s[at..end])
            .ok()
            .and_then(|t| t.parse::<u128>().ok())
        {
            Some(v) if !fraction => {
                self.pos = end;
                Ok(v)
            }
            _ => Err(self.expected(&format!(
                "a whole number of 0 or more (below 2^128) for {what}"
            ))),
        }
    }

    /// A whole number, signed.
    fn integer(&mut self, what: &str, signed: bool) -> Result<i128, LangError> {
        self.skip_ws();
        let at = self.pos;
        let sign = matches!(self.s.get(at), Some(b'+' | b'-'));
        match self.number() {
            Some(Num::Int(v)) if signed || !sign => Ok(v),
            _ => {
                self.pos = at;
                let kind = if signed {
                    "a whole number"
                } else {
                    "a whole number of 0 or more"
                };
                Err(self.expected(&format!("{kind} for {what}")))
            }
        }
    }

    fn expr(&mut self) -> Result<Arc<Expr>, LangError> {
        let mut left = self.term()?;
        loop {
            let op = match self.peek() {
                Some(b'+') => Op::Add,
                Some(b'-') => Op::Sub,
                _ => return Ok(left),
            };
            let at = self.pos;
            self.pos += 1;
            let right = self.term()?;
            left = self.combine(op, left, right, at)?;
        }
    }

    fn term(&mut self) -> Result<Arc<Expr>, LangError> {
        let mut left = self.atom()?;
        while self.peek() == Some(b'*') {
            let at = self.pos;
            self.pos += 1;
            let right = self.atom()?;
            left = self.combine(Op::Mul, left, right, at)?;
        }
        Ok(left)
    }

    fn combine(
        &self,
        op: Op,
        a: Arc<Expr>,
        b: Arc<Expr>,
        at: usize,
    ) -> Result<Arc<Expr>, LangError> {
        self.not_terminal(&a, at)?;
        self.not_terminal(&b, at)?;
        Ok(Arc::new(Expr::Binary(op, a, b)))
    }

    /// katgpucbf's rule: a `nodither` signal is whole; nothing may be built on it.
    fn not_terminal(&self, e: &Expr, at: usize) -> Result<(), LangError> {
        if let Expr::Nodither(_) = e {
            Err(self.fail_at(
                at,
                &format!("signal '{e}' cannot be used in a larger expression"),
            ))
        } else {
            Ok(())
        }
    }

    fn atom(&mut self) -> Result<Arc<Expr>, LangError> {
        let at = self.pos;
        if let Some(n) = self.number() {
            if !n.value().is_finite() {
                return Err(self.fail_at(at, "a constant must be a finite number"));
            }
            return Ok(Arc::new(Expr::Constant(n.value())));
        }
        if self.peek() == Some(b'(') {
            self.pos += 1;
            let e = self.expr()?;
            self.expect(b')', "')' to close the '('")?;
            return Ok(e);
        }
        let start = self.pos;
        let Some(name) = self.ident() else {
            return Err(
                self.expected("a signal (a number, a function such as cw(...), a variable or '(')")
            );
        };
        if FUNCTIONS.contains(&name.as_str()) && self.peek() == Some(b'(') {
            self.pos += 1;
            let e = self.call(&name, start)?;
            self.expect(b')', &format!("')' to close {name}(..."))?;
            return Ok(Arc::new(e));
        }
        match self.vars.get(&name) {
            Some(e) => Ok(e.clone()),
            None if FUNCTIONS.contains(&name.as_str()) => {
                Err(self.expected(&format!("'(' after {name}")))
            }
            None => Err(self.fail_at(
                start,
                &format!(
                    "unknown variable '{name}' (a variable must be defined before it is used)"
                ),
            )),
        }
    }

    fn comma(&mut self, name: &str) -> Result<(), LangError> {
        self.expect(b',', &format!("',' between the arguments of {name}"))
    }

    fn call(&mut self, name: &str, start: usize) -> Result<Expr, LangError> {
        Ok(match name {
            "cw" | "comb" => {
                let amplitude = self.real("the amplitude")?;
                self.comma(name)?;
                let frequency = self.real("the frequency")?;
                if name == "cw" {
                    Expr::Cw {
                        amplitude,
                        frequency,
                    }
                } else {
                    Expr::Comb {
                        amplitude,
                        frequency,
                    }
                }
            }
            "multicw" => {
                let m = self.unsigned("the number of waves")?;
                let mut args = [0.0; 4];
                for (a, what) in args.iter_mut().zip([
                    "the first amplitude",
                    "the amplitude step",
                    "the first frequency",
                    "the frequency step",
                ]) {
                    self.comma(name)?;
                    *a = self.real(what)?;
                }
                let [amplitude0, amplitude_step, frequency0, frequency_step] = args;
                let m = u32::try_from(m).map_err(|_| {
                    self.fail_at(start, &format!("multicw of {m} waves is too many"))
                })?;
                Expr::MultiCw {
                    m,
                    amplitude0,
                    amplitude_step,
                    frequency0,
                    frequency_step,
                }
            }
            "wgn" => {
                let std = self.real("the standard deviation")?;
                let entropy = if self.peek() == Some(b',') {
                    self.pos += 1;
                    self.unsigned("the entropy")?
                } else {
                    (self.fresh_entropy)()
                };
                Expr::Wgn { std, entropy }
            }
            "delay" => {
                let inner = self.expr()?;
                self.not_terminal(&inner, start)?;
                self.comma(name)?;
                let at = self.pos;
                let d = self.integer("the delay in samples", true)?;
                let d = i64::try_from(d).map_err(|_| {
                    self.fail_at(at, &format!("a delay of {d} samples is too large"))
                })?;
                Expr::Delay(inner, d)
            }
            _ => {
                let inner = self.expr()?;
                self.not_terminal(&inner, start)?;
                Expr::Nodither(inner)
            }
        })
    }
}
