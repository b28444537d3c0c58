//! katgpucbf's text forms of complex gains, as Python writes and reads them (`1`, `0.5-0.25j`,
//! `(1+2j)`): what the engine's katcp front reads and writes, and what a katcp client of an engine
//! (the harness) sends and reads back.

/// Reads a complex number as Python's `complex()` does: `re`, `imj`, `re+imj` or `re-imj`, in
/// parentheses or not, `j` alone meaning 1j.
pub fn parse_complex(text: &str) -> Option<[f64; 2]> {
    let s = text.trim();
    let s = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .map_or(s, str::trim);
    let num = |t: &str| -> Option<f64> {
        match t {
            "" | "+" => Some(1.0),
            "-" => Some(-1.0),
            t if t.starts_with(['+', '-']) && t[1..].starts_with(['+', '-']) => None,
            t => t.parse().ok(),
        }
    };
    let Some(body) = s.strip_suffix(['j', 'J']) else {
        return if s.is_empty() || s.contains(char::is_whitespace) {
            None
        } else {
            Some([s.parse().ok()?, 0.0])
        };
    };
    if body.contains(char::is_whitespace) {
        return None;
    }
    // The sign that starts the imaginary part: the last + or - not at the start and not in an
    // exponent.
    let b = body.as_bytes();
    let split = (1..b.len())
        .rev()
        .find(|&i| matches!(b[i], b'+' | b'-') && !matches!(b[i - 1], b'e' | b'E'));
    match split {
        None => Some([0.0, num(body)?]),
        Some(i) => {
            let re = &body[..i];
            if re.is_empty() {
                return None;
            }
            Some([re.parse().ok()?, num(&body[i..])?])
        }
    }
}

/// A complex gain as text Python's `complex()` reads back: `1+0j`, `0.1-0.5j` (each part the
/// engine's float32 as its shortest decimal).
pub fn complex_text([re, im]: [f64; 2]) -> String {
    format!("{re}{im:+}j")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_numbers_read_as_python_reads_them() {
        for (t, want) in [
            ("1", [1.0, 0.0]),
            (" -2.5 ", [-2.5, 0.0]),
            ("2j", [0.0, 2.0]),
            ("j", [0.0, 1.0]),
            ("-j", [0.0, -1.0]),
            ("1+2j", [1.0, 2.0]),
            ("0.5-0.25j", [0.5, -0.25]),
            ("(1-1J)", [1.0, -1.0]),
            ("1e-3+2.5e+2j", [1e-3, 250.0]),
            ("-1e-3-j", [-1e-3, -1.0]),
            ("inf", [f64::INFINITY, 0.0]),
        ] {
            assert_eq!(parse_complex(t), Some(want), "{t}");
        }
        for t in [
            "", "x", "1+", "1 + 2j", "1+2", "+-1", "1++2j", "()", "1,2", "jj",
        ] {
            assert_eq!(parse_complex(t), None, "{t}");
        }
    }

    #[test]
    fn gains_are_written_as_katgpucbf_writes_them() {
        assert_eq!(complex_text([1.0, 0.0]), "1+0j");
        assert_eq!(complex_text([0.1, -0.5]), "0.1-0.5j");
        for z in [[1.0, 0.0], [0.1, -0.5], [-3e-5, 2.0]] {
            assert_eq!(parse_complex(&complex_text(z)), Some(z));
        }
    }
}
