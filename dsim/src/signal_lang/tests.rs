use super::*;

fn parse(text: &str) -> Result<Program, LangError> {
    let mut next = 100u128;
    parse::parse(text, &mut || {
        next += 1;
        next
    })
}

#[test]
fn every_term_reads_and_prints_as_katgpucbf_prints_it() {
    for (text, canonical) in [
        ("cw(1.0, 232101234.0);", "cw(1.0, 232101234.0);"),
        ("cw(0.5, 1e8); cw(0.3, 4e8) + 0.1;", "cw(0.5, 100000000.0); (cw(0.3, 400000000.0) + 0.1);"),
        ("comb(0.7, 1e6); delay(comb(0.5, 3.3e6), -7);", "comb(0.7, 1000000.0); delay(comb(0.5, 3300000.0), -7);"),
        (
            "nodither(cw(0.25, 1.5e8)); nodither(0.3 * cw(0.9, 2e8) - 0.01);",
            "nodither(cw(0.25, 150000000.0)); nodither(((0.3 * cw(0.9, 200000000.0)) - 0.01));",
        ),
        (
            "a = cw(0.4, 3e8); b = delay(a, 5) * cw(0.9, 1.1e8); a - b; nodither(b);",
            "(cw(0.4, 300000000.0) - (delay(cw(0.4, 300000000.0), 5) * cw(0.9, 110000000.0))); nodither((delay(cw(0.4, 300000000.0), 5) * cw(0.9, 110000000.0)));",
        ),
        ("0; 0.0;", "0.0; 0.0;"),
        ("wgn(0.05, 42); wgn(0.05,42)+cw(0.1,1e8);", "wgn(0.05, 42); (wgn(0.05, 42) + cw(0.1, 100000000.0));"),
        ("multicw(3, 0.3, -0.1, 5e8, 1e8);", "multicw(3, 0.3, -0.1, 500000000.0, 100000000.0);"),
        ("\n  x = 1e-5 ;\n x*x-(x+-2) ;", "((1e-05 * 1e-05) - (1e-05 + -2.0));"),
        ("cw(1, 2e16) - -.5;", "(cw(1.0, 2e+16) - -0.5);"),
    ] {
        let p = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(p.canonical(), canonical, "{text}");
        // The canonical form reads back as the same program.
        assert_eq!(parse(&p.canonical()).unwrap().outputs, p.outputs, "{text}");
    }
}

#[test]
fn a_variable_shares_its_noise_and_a_wgn_without_entropy_gets_its_own() {
    let p = parse("n = wgn(0.1); n + cw(0.2, 5e7); n - wgn(0.1);").unwrap();
    let Expr::Binary(_, a, _) = &*p.outputs[0] else {
        panic!()
    };
    let Expr::Binary(_, b, c) = &*p.outputs[1] else {
        panic!()
    };
    assert!(Arc::ptr_eq(a, b));
    assert_eq!(
        **a,
        Expr::Wgn {
            std: 0.1,
            entropy: 101
        }
    );
    assert_eq!(
        **c,
        Expr::Wgn {
            std: 0.1,
            entropy: 102
        }
    );
}

#[test]
fn precedence_is_product_then_left_to_right_sum() {
    let p = parse("1 - 2 - 3 * 4 + 5;").unwrap();
    assert_eq!(p.canonical(), "(((1.0 - 2.0) - (3.0 * 4.0)) + 5.0);");
    let p = parse("1 - (2 - 3);").unwrap();
    assert_eq!(p.canonical(), "(1.0 - (2.0 - 3.0));");
}

#[test]
fn bad_specs_get_one_sentence_each() {
    for (text, expect) in [
        ("cw(1.0, 1e9)", "at character 13: expected ';' after the expression, found the end of the spec."),
        ("cw(1.0);", "at character 7: expected ',' between the arguments of cw, found ');'."),
        ("cw(1.0, x);", "at character 9: expected a number for the frequency, found 'x);'."),
        ("sine(1, 2);", "at character 1: unknown variable 'sine'"),
        ("y;", "unknown variable 'y' (a variable must be defined before it is used)."),
        ("a = 1; a = 2; a;", "at character 8: variable 'a' is defined twice"),
        ("nodither(cw(1, 2)) + 1;", "at character 20: signal 'nodither(cw(1.0, 2.0))' cannot be used in a larger expression."),
        ("a = nodither(1); delay(a, 2);", "signal 'nodither(1.0)' cannot be used in a larger expression."),
        ("nodither(nodither(1));", "cannot be used in a larger expression."),
        ("delay(cw(1, 2), 1.5);", "expected a whole number for the delay in samples, found '1.5);'."),
        ("wgn(0.1, -3);", "expected a whole number of 0 or more (below 2^128) for the entropy, found '-3);'."),
        ("multicw(2.5, 1, 1, 1, 1);", "expected a whole number of 0 or more (below 2^128) for the number of waves"),
        ("multicw(99999999999, 1, 1, 1, 1);", "multicw of 99999999999 waves is too many."),
        ("cw(1, 1e999);", "the frequency is not a finite number."),
        ("1e999;", "a constant must be a finite number."),
        ("cw(1, 2) cw(1, 2);", "at character 10: expected ';' after the expression, found 'cw(1, 2);'."),
        ("(1 + 2;", "expected ')' to close the '('"),
        ("cw;", "expected '(' after cw"),
        ("+;", "expected a signal (a number, a function such as cw(...), a variable or '('), found '+;'."),
        ("1 + ;", "at character 5: expected a signal"),
        ("1 ; ; ", "at character 5: expected a signal"),
        ("wgn(0.1, 999999999999999999999999999999999999999999);", "expected a whole number of 0 or more (below 2^128) for the entropy"),
    ] {
        let e = parse(text).expect_err(text).0;
        assert!(e.contains(expect), "{text}: {e:?} should contain {expect:?}");
        assert!(e.ends_with('.') && e.matches(". ").count() == 0, "{text}: {e:?} is not one sentence");
    }
}

#[test]
fn one_expression_stands_for_every_polarisation_and_other_counts_are_refused() {
    let p = Program::parse_for("cw(0.1, 1e8);", 2).unwrap();
    assert_eq!(p.outputs.len(), 2);
    let e = Program::parse_for("1; 2; 3;", 2).unwrap_err().0;
    assert_eq!(
        e,
        "the spec gives 3 signals; it must give 1 or 2 (one per polarisation, each ended by ';')."
    );
    assert!(Program::parse_for("", 2).is_err());
}

#[test]
fn python_floats() {
    for (v, s) in [
        (1.0, "1.0"),
        (232101234.0, "232101234.0"),
        (1e16, "1e+16"),
        (1.5e-5, "1.5e-05"),
        (0.0001, "0.0001"),
        (-2.5e300, "-2.5e+300"),
        (1e15, "1000000000000000.0"),
    ] {
        assert_eq!(python_float(v), s);
    }
}
