//! katgpucbf's signal language (`--signals`, `PUT /signal` with `signals`, katcp `?signals`):
//! one expression per polarisation, each ended by ';', built from `cw`, `multicw`, `comb`,
//! `wgn`, `delay`, constants, `nodither` and `+ - *`, with variables that share a signal (and
//! its noise) between expressions. docs/signals.md has the grammar and examples.
//!
//! A spec is evaluated on its own rather than lowered into dsim's component model, because the
//! language has products of signals and shared noise, and because it is sampled as katgpucbf
//! samples it: in float32 over one period (frequencies rounded to whole cycles per period,
//! katgpucbf's chunks of 2^20 samples), quantised with katgpucbf's dither, drawn with numpy's
//! generators from the dither seed. The result is sample for sample what katgpucbf's dsim sends,
//! except `wgn`'s values ([`eval`] says why) and rare one-LSB differences in `cw` and `multicw`.
//!
//! [`parse`](parse::parse) reads the text into a [`Program`]; [`eval::sample_pol`] samples one
//! polarisation into quantised samples.

pub mod eval;
pub mod numpy_rng;
pub mod parse;

use std::fmt;
use std::sync::Arc;

/// Why a spec is refused: one sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LangError(pub String);

/// A number as written: an integer or a real (counts, entropy and delays must be integers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    pub fn value(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Float(v) => v,
        }
    }
}

/// `v` as Python's `repr(float)` writes it (shortest round trip; an exponent below 1e-4 and
/// from 1e16).
pub fn python_float(v: f64) -> String {
    let s = format!("{v:?}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// A real argument as katgpucbf prints it (its parser keeps integers as integers).
struct Real(f64);

impl fmt::Display for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&python_float(self.0))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
}

/// A signal expression. Variables are resolved while parsing: a variable used twice is the same
/// node twice, so its `wgn` entropy (drawn once) is shared.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A constant (katgpucbf keeps it as a float).
    Constant(f64),
    Cw {
        amplitude: f64,
        frequency: f64,
    },
    MultiCw {
        m: u32,
        amplitude0: f64,
        amplitude_step: f64,
        frequency0: f64,
        frequency_step: f64,
    },
    Comb {
        amplitude: f64,
        frequency: f64,
    },
    Wgn {
        std: f64,
        entropy: u128,
    },
    Delay(Arc<Expr>, i64),
    Nodither(Arc<Expr>),
    Binary(Op, Arc<Expr>, Arc<Expr>),
}

impl Expr {
    /// Whether dither is left off: katgpucbf's `nodither`, which can only stand at the top.
    pub fn is_nodither(&self) -> bool {
        matches!(self, Expr::Nodither(_))
    }
}

impl fmt::Display for Expr {
    /// As katgpucbf's `format_signals` writes each signal (with multicw's frequencies written
    /// out, where katgpucbf's own string leaves its placeholders).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Constant(v) => write!(f, "{}", Real(*v)),
            Expr::Cw {
                amplitude,
                frequency,
            } => write!(f, "cw({}, {})", Real(*amplitude), Real(*frequency)),
            Expr::MultiCw {
                m,
                amplitude0,
                amplitude_step,
                frequency0,
                frequency_step,
            } => write!(
                f,
                "multicw({m}, {}, {}, {}, {})",
                Real(*amplitude0),
                Real(*amplitude_step),
                Real(*frequency0),
                Real(*frequency_step)
            ),
            Expr::Comb {
                amplitude,
                frequency,
            } => write!(f, "comb({}, {})", Real(*amplitude), Real(*frequency)),
            Expr::Wgn { std, entropy } => write!(f, "wgn({}, {entropy})", Real(*std)),
            Expr::Delay(e, d) => write!(f, "delay({e}, {d})"),
            Expr::Nodither(e) => write!(f, "nodither({e})"),
            Expr::Binary(op, a, b) => {
                let op = match op {
                    Op::Add => "+",
                    Op::Sub => "-",
                    Op::Mul => "*",
                };
                write!(f, "({a} {op} {b})")
            }
        }
    }
}

/// A parsed spec: the output expressions in order, and the text as given.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub outputs: Vec<Arc<Expr>>,
    pub source: String,
}

impl Program {
    /// Reads `text`; a `wgn` without entropy gets fresh random entropy, fixed from then on.
    pub fn parse(text: &str) -> Result<Self, LangError> {
        parse::parse(text, &mut || rand::random::<u64>() as u128)
    }

    /// Reads `text` for `pols` outputs: as katgpucbf's command line, a single expression stands
    /// for every polarisation.
    pub fn parse_for(text: &str, pols: usize) -> Result<Self, LangError> {
        let mut p = Self::parse(text)?;
        match p.outputs.len() {
            n if n == pols => Ok(p),
            1 => {
                p.outputs = vec![p.outputs[0].clone(); pols];
                Ok(p)
            }
            n => Err(LangError(format!(
                "the spec gives {n} signals; it must give 1 or {pols} (one per polarisation, each ended by ';')."
            ))),
        }
    }

    /// The spec as katgpucbf's `signals` sensor shows it: reproducible (every `wgn` with its
    /// entropy), one expression per output.
    pub fn canonical(&self) -> String {
        let parts: Vec<String> = self.outputs.iter().map(|e| e.to_string()).collect();
        format!("{};", parts.join("; "))
    }
}

/// A signal in the language as put in force: the program and its period in samples.
#[derive(Clone, Debug, PartialEq)]
pub struct LangSignal {
    pub program: Program,
    /// Samples after which the signal repeats; it divides the buffer.
    pub period: u64,
}

#[cfg(test)]
mod tests;
